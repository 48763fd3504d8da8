"""Where rendered pods may land, checked against the e2e cluster's node pools.

A small model of the scheduler's filters (nodeSelector, required node affinity,
taints and tolerations, extended resources) is evaluated over the fake nodes of
e2e/cluster/nodes.yaml; the e2e suite checks the real scheduler.
"""

import pathlib

import pytest
import yaml

from ttsfleet_operator.render import render_fleet

NODES_FILE = pathlib.Path(__file__).resolve().parents[2] / "e2e" / "cluster" / "nodes.yaml"
SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "cloud.google.com/gke-spot": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}


def nodes() -> list[dict]:
    if not NODES_FILE.exists():
        pytest.skip(f"{NODES_FILE} (the e2e cluster's node pools) is missing")
    return [
        doc
        for doc in yaml.safe_load_all(NODES_FILE.read_text())
        if doc and doc.get("kind") == "Node"
    ]


def expression_holds(expression: dict, node_labels: dict) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    if operator == "In":
        return node_labels.get(key) in values
    if operator == "NotIn":
        return node_labels.get(key) not in values
    if operator == "Exists":
        return key in node_labels
    if operator == "DoesNotExist":
        return key not in node_labels
    raise AssertionError(f"operator {operator} not modelled")


def tolerated(taint: dict, tolerations: list[dict]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, taint["effect"]):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, taint["key"]):
            return True
        if toleration.get("key") == taint["key"] and toleration.get("value") == taint.get("value"):
            return True
    return False


def fits(pod: dict, node: dict) -> bool:
    node_labels = node["metadata"].get("labels", {})
    if any(node_labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required and not any(
        all(expression_holds(e, node_labels) for e in term["matchExpressions"])
        for term in required["nodeSelectorTerms"]
    ):
        return False
    for taint in node["spec"].get("taints") or []:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerated(
            taint, pod.get("tolerations", [])
        ):
            return False
    allocatable = node["status"]["allocatable"]
    for resource, amount in pod["containers"][0]["resources"]["requests"].items():
        if resource.startswith("nvidia.com/") and int(allocatable.get(resource, 0)) < int(amount):
            return False
    return True


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
