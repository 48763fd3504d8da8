"""Where rendered pods may land, checked against the e2e cluster's node pools.

A small model of the scheduler's filters (tests/support/scheduler_model.py) is evaluated
over the fake nodes of e2e/cluster/nodes.yaml; the e2e suite checks the real scheduler.
"""

import pytest

from support.scheduler_model import fits, nodes
from ttsfleet_operator.render import render_fleet

SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "cloud.google.com/gke-spot": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}


def placements(service) -> dict[str, list[dict]]:
    """Deployment name -> nodes its pods fit on."""
    return {
        m["metadata"]["name"]: [n for n in nodes() if fits(m["spec"]["template"]["spec"], n)]
        for m in render_fleet(service)
        if m["kind"] == "Deployment"
    }


def is_spot(node: dict) -> bool:
    node_labels = node["metadata"]["labels"]
    return any(node_labels.get(k) == v for k, v in SPOT_LABELS.items())


@pytest.mark.parametrize("gpu_class", ["h100", "h200", "a100-80gb", "l4"])
def test_spot_pods_land_only_on_spot_nodes_and_on_demand_pods_never_do(make_service, gpu_class):
    where = placements(make_service(gpu={"class": gpu_class}, replicas=4, spot={"ratio": 0.5}))
    assert where["demo-spot"], "spot pods fit nowhere"
    assert where["demo-on-demand"], "on-demand pods fit nowhere"
    assert all(is_spot(n) for n in where["demo-spot"])
    assert not any(is_spot(n) for n in where["demo-on-demand"])


@pytest.mark.parametrize(
    "gpu_class, product",
    [("h100", "NVIDIA-H100-80GB-HBM3"), ("h200", "NVIDIA-H200"), ("l4", "NVIDIA-L4")],
)
def test_pods_land_only_on_their_gpu_class(make_service, gpu_class, product):
    where = placements(make_service(gpu={"class": gpu_class}, replicas=2, spot={"ratio": 0.5}))
    for fitting in where.values():
        assert {n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in fitting} == {product}


def test_without_gpu_toleration_nothing_would_fit(make_service):
    # Guards the model above: GPU nodes are tainted, so the toleration is what lets pods in.
    deployment = render_fleet(make_service())[1]
    pod = deployment["spec"]["template"]["spec"]
    pod = {**pod, "tolerations": []}
    assert not any(fits(pod, n) for n in nodes())


def test_a_user_spot_selector_replaces_the_cloud_defaults(make_service):
    service = make_service(
        replicas=2,
        spot={
            "ratio": 0.5,
            "nodeSelector": {"pool": "cheap"},
            "tolerations": [{"key": "cheap", "operator": "Exists"}],
        },
    )
    by_name = {m["metadata"]["name"]: m for m in render_fleet(service)}
    spot_pod = by_name["demo-spot"]["spec"]["template"]["spec"]
    on_demand_pod = by_name["demo-on-demand"]["spec"]["template"]["spec"]
    spot_terms = spot_pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert spot_terms == [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cheap"]}]}
    ]
    assert {"key": "cheap", "operator": "Exists"} in spot_pod["tolerations"]
    od_terms = on_demand_pod["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert od_terms == [
        {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["cheap"]}]}
    ]


def test_gpu_product_override_wins_over_the_table(make_service):
    deployment = render_fleet(make_service(gpu={"class": "h100", "product": "NVIDIA-H100-PCIe"}))[1]
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-PCIe"
    }
