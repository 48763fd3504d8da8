"""The operator against a real API server: samples become owned children on the right
GPU nodes, status reports Ready for the generation it saw, invalid specs are refused
by the API server's CEL rules, deletion is garbage collection, Pod Security admits us."""

from __future__ import annotations

import json
import time

import pytest

from support.operator_fixtures import (
    children,
    load_sample,
    owned_by,
    pods_by_node,
    wait_ready,
)
from ttsfleet_operator.gpu_classes import GPU_CLASSES
from ttsfleet_operator.replicas import split_replicas

pytestmark = pytest.mark.timeout(180)

CHILD_KINDS = ("deployments", "services", "configmaps", "poddisruptionbudgets")
SAMPLES = [
    "base-0.6b.yaml",
    "customvoice-1.7b.yaml",
    "voicedesign-1.7b.yaml",
    "spot.yaml",
    "canary.yaml",
]


def _is_spot(node: dict) -> bool:
    return node["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"


@pytest.mark.parametrize("sample", SAMPLES)
def test_sample_becomes_owned_children_on_the_right_gpus_and_reports_ready(
    cluster, running_operator, namespace, sample
):
    manifest = load_sample(sample)
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    cluster.apply(manifest, "-n", namespace)

    obj = wait_ready(cluster, name, namespace)
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["readyReplicas"] == status["replicas"] == spec["replicas"], status
    # The operator tells changes from the watch: no kopf diff-base written onto the object
    # (a PATCH more per change), no progress annotations, no finalizer.
    written_by_kopf = [
        key for key in obj["metadata"].get("annotations") or {} if "ttsfleet.io/" in key
    ]
    assert written_by_kopf == [], written_by_kopf
    assert not obj["metadata"].get("finalizers"), obj["metadata"]["finalizers"]

    for kind in CHILD_KINDS:
        objs = children(cluster, kind, name, namespace)
        assert objs, f"no {kind} for {name}"
        for child in objs:
            assert owned_by(child, obj), (
                f"{kind}/{child['metadata']['name']} lacks a controller ownerReference"
            )

    # Every pod on a node of the requested GPU class; spot pods only on spot nodes and
    # the on-demand floor on on-demand nodes, as the one splitter says.
    product = GPU_CLASSES[spec["gpu"]["class"]].product
    spot = spec.get("spot") or {}
    placed = pods_by_node(cluster, name, namespace)
    assert len(placed) == spec["replicas"], [p["metadata"]["name"] for p, _ in placed]
    for pod, node in placed:
        assert node is not None, f"pod {pod['metadata']['name']} not scheduled"
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == product, (
            pod["metadata"]["name"],
            node["metadata"]["name"],
        )
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
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "ttsfleet.io/v1alpha1",
            "kind": "TTSService",
            "name": name,
        }
        assert hpa["spec"]["minReplicas"] == spec["autoscaling"]["minReplicas"]
        assert hpa["spec"]["maxReplicas"] == spec["autoscaling"]["maxReplicas"]


def _base(name: str = "tts-invalid", **spec) -> dict:
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": name},
        "spec": {
            "model": {"size": "1.7B", "variant": "CustomVoice"},
            "gpu": {"class": "h100"},
            "replicas": 1,
            **spec,
        },
    }


INVALID = {
    "voicedesign-at-0.6b": (
        _base(model={"size": "0.6B", "variant": "VoiceDesign"}),
        "VoiceDesign is only released at size 1.7B",
    ),
    "25hz-without-source": (
        _base(model={"size": "1.7B", "variant": "Base", "tokenizerRateHz": 25}),
        "no 25 Hz Qwen3-TTS checkpoint is published",
    ),
    "autoscaling-min-above-max": (
        _base(autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 2}),
        "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
    ),
    "floor-above-autoscaling-max": (
        _base(
            spot={"ratio": 0.5, "minOnDemand": 8},
            autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 4},
        ),
        "spot.minOnDemand must not exceed autoscaling.maxReplicas",
    ),
    "candidate-without-image-or-revision": (
        _base(canary={"percent": 10, "candidate": {}}),
        "canary.candidate needs an image or a modelRevision",
    ),
    "name-too-long": (
        _base(name="tts-" + "x" * 40),
        "a TTSService name has at most 40 characters",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_api_server_refuses_invalid_tts_service_with_the_cel_message(cluster, namespace, case):
    manifest, message = INVALID[case]
    proc = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False
    )
    assert proc.returncode != 0, f"{case}: accepted by the API server:\n{proc.stdout}"
    assert "is invalid" in proc.stderr and message in proc.stderr, (
        f"{case}: expected {message!r} in:\n{proc.stderr}"
    )
    assert cluster.get("tts", "-n", namespace)["items"] == []


def test_deleting_the_tts_service_garbage_collects_its_children(
    cluster, running_operator, namespace
):
    manifest = load_sample("customvoice-1.7b.yaml")
    name = manifest["metadata"]["name"]
    cluster.apply(manifest, "-n", namespace)
    obj = wait_ready(cluster, name, namespace)
    assert not obj["metadata"].get("finalizers"), (
        f"finalizers on the TTSService: {obj['metadata']['finalizers']}"
    )
    # The API keys Secret the operator created (auth on by default) goes with the rest.
    assert [s["metadata"]["name"] for s in children(cluster, "secrets", name, namespace)] == [
        f"{name}-api-keys"
    ]

    # --wait: a finalizer left behind would hang here, not pass.
    cluster.kubectl("delete", "tts", name, "-n", namespace, "--wait=true", "--timeout=30s")
    kinds = (*CHILD_KINDS, "horizontalpodautoscalers", "pods", "secrets")

    def leftovers():
        return {
            kind: [o["metadata"]["name"] for o in children(cluster, kind, name, namespace)]
            for kind in kinds
        }

    cluster.wait_for(
        lambda: not any(leftovers().values()),
        timeout=60,
        what="children garbage-collected",
    )
    # The operator's next passes do not bring anything back.
    time.sleep(2 * running_operator.resync_seconds + 1)
    assert not any(leftovers().values()), leftovers()


def test_namespace_enforcing_restricted_pod_security_admits_the_runtime_pods(
    cluster, running_operator, namespace
):
    cluster.kubectl(
        "label",
        "namespace",
        namespace,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
        "pod-security.kubernetes.io/warn=restricted",
    )
    manifest = load_sample("spot.yaml")
    name = manifest["metadata"]["name"]
    cluster.apply(manifest, "-n", namespace)
    obj = wait_ready(cluster, name, namespace)
    assert obj["status"]["readyReplicas"] == manifest["spec"]["replicas"]
    refused = [
        e["message"]
        for e in cluster.get("events", "-n", namespace)["items"]
        if e.get("reason") == "FailedCreate"
    ]
    assert not refused, refused
