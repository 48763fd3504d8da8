"""The operator against a real API server: samples become owned children on the right
GPU nodes, status reports Ready for the generation it saw, invalid specs are refused
by the API server's CEL rules, deletion is garbage collection, Pod Security admits us."""

from __future__ import annotations

import pytest
from operator_fixtures import (
    children,
    condition,
    load_sample,
    owned_by,
    pods_by_node,
    tts,
    wait_ready,
)

from ttsfleet_operator.gpu_classes import GPU_CLASSES
from ttsfleet_operator.replicas import split_replicas

pytestmark = pytest.mark.timeout(180)

CHILD_KINDS = ("deployments", "services", "configmaps", "poddisruptionbudgets")
SAMPLES = ["base-0.6b.yaml", "customvoice-1.7b.yaml", "voicedesign-1.7b.yaml", "spot.yaml", "canary.yaml"]


def _is_spot(node: dict) -> bool:
    return node["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"


@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_becomes_owned_children_on_the_right_gpus_and_reports_ready(cluster, running_operator, namespace, sample):
    manifest = load_sample(sample)
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    cluster.apply(manifest, "-n", namespace)

    obj = wait_ready(cluster, name, namespace)
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["readyReplicas"] == status["replicas"] == spec["replicas"], status

    for kind in CHILD_KINDS:
        objs = children(cluster, kind, name, namespace)
        assert objs, f"no {kind} for {name}"
        for child in objs:
            assert owned_by(child, obj), f"{kind}/{child['metadata']['name']} lacks a controller ownerReference"

    # Every pod on a node of the requested GPU class; spot pods only on spot nodes and
    # the on-demand floor on on-demand nodes, as the one splitter says.
    product = GPU_CLASSES[spec["gpu"]["class"]].product
    spot = spec.get("spot") or {}
    placed = pods_by_node(cluster, name, namespace)
    assert len(placed) == spec["replicas"], [p["metadata"]["name"] for p, _ in placed]
    for pod, node in placed:
        assert node is not None, f"pod {pod['metadata']['name']} not scheduled"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == product, (pod["metadata"]["name"], node["metadata"]["name"])
        assert _is_spot(node) == (pod["metadata"]["labels"]["ttsfleet.io/pool"] == "spot"), (
            f"pod {pod['metadata']['name']} of pool {pod['metadata']['labels']['ttsfleet.io/pool']}"
            f" on node {node['metadata']['name']}"
        )
    if "canary" not in spec:
        split = split_replicas(spec["replicas"], spot.get("ratio", 0.0), spot.get("minOnDemand", 0))
        on_spot = sum(1 for _, node in placed if _is_spot(node))
        assert (len(placed) - on_spot, on_spot) == (split.on_demand, split.spot)

    if (spec.get("autoscaling") or {}).get("enabled"):
        (hpa,) = children(cluster, "horizontalpodautoscalers", name, namespace)
        assert owned_by(hpa, obj)
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ttsfleet.io/v1alpha1", "kind": "TTSService", "name": name}
        assert hpa["spec"]["minReplicas"] == spec["autoscaling"]["minReplicas"]
        assert hpa["spec"]["maxReplicas"] == spec["autoscaling"]["maxReplicas"]
