"""`spec.replicas` through the /scale subresource (kubectl scale, or the HPA's own
GET+PUT of a Scale) moves the Deployments by the one splitter; afterwards nobody
writes replicas back and forth."""

from __future__ import annotations

import time

import pytest

from support.operator_fixtures import deployment_replicas, load_sample, resyncs, tts, wait_ready
from ttsfleet_operator.render.names import deployment_name
from ttsfleet_operator.replicas import split_replicas

pytestmark = pytest.mark.timeout(180)


def expected_deployments(name: str, spec: dict, replicas: int) -> dict[str, int]:
    spot = spec.get("spot") or {}
    split = split_replicas(replicas, spot.get("ratio", 0.0), spot.get("minOnDemand", 0))
    return {
        deployment_name(name, "stable", "on-demand"): split.on_demand,
        deployment_name(name, "stable", "spot"): split.spot,
    }


def wait_split(cluster, name, namespace, spec, replicas):
    want = expected_deployments(name, spec, replicas)
    cluster.wait_for(
        lambda: (
            {k: v for k, v in deployment_replicas(cluster, name, namespace).items() if k in want}
            == want
        ),
        timeout=60,
        what=f"Deployments split as {want} (have {deployment_replicas(cluster, name, namespace)})",
    )
    return want


def assert_steady(cluster, name, namespace, replicas, want, passes=3):
    """No writer moves replicas over several resync passes (and HPA syncs)."""
    generation = tts(cluster, name, namespace)["metadata"]["generation"]
    rvs = {
        d["metadata"]["name"]: d["metadata"]["resourceVersion"]
        for d in cluster.get("deployments", "-n", namespace)["items"]
    }
    time.sleep(resyncs(passes))
    obj = tts(cluster, name, namespace)
    assert obj["spec"]["replicas"] == replicas
    assert obj["metadata"]["generation"] == generation, "spec.replicas was rewritten"
    assert {
        k: v for k, v in deployment_replicas(cluster, name, namespace).items() if k in want
    } == want
    for d in cluster.get("deployments", "-n", namespace)["items"]:
        # Status updates by the deployment controller bump resourceVersion too; the
        # generation is what a spec write changes.
        assert d["metadata"]["generation"] == d["status"].get("observedGeneration"), d["metadata"][
            "name"
        ]
    assert set(rvs) == {
        d["metadata"]["name"] for d in cluster.get("deployments", "-n", namespace)["items"]
    }


def test_kubectl_scale_moves_the_pools_by_the_split_and_stays(cluster, running_operator, namespace):
    manifest = load_sample("spot.yaml")
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, name, namespace)

    # Within the HPA's bounds (3..12), so the HPA has no reason to move it back.
    cluster.kubectl("scale", f"tts/{name}", "-n", namespace, "--replicas", "9")
    want = wait_split(cluster, name, namespace, spec, 9)
    obj = wait_ready(cluster, name, namespace)
    assert obj["status"]["replicas"] == 9
    assert_steady(cluster, name, namespace, 9, want)


def test_hpa_style_scale_write_moves_the_pools_and_the_scale_reads_back(
    cluster, running_operator, namespace
):
    from kubernetes import client

    manifest = load_sample("spot.yaml")
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, name, namespace)

    # What the HPA controller does: GET the Scale, PUT it back with new replicas.
    api = client.CustomObjectsApi(cluster.api_client())
    scale = api.get_namespaced_custom_object_scale(
        "ttsfleet.io", "v1alpha1", namespace, "ttsservices", name
    )
    assert scale["spec"]["replicas"] == spec["replicas"]
    assert scale["status"]["selector"], f"the Scale has no selector for the HPA: {scale}"
    scale["spec"]["replicas"] = 4
    api.replace_namespaced_custom_object_scale(
        "ttsfleet.io", "v1alpha1", namespace, "ttsservices", name, scale
    )

    want = wait_split(cluster, name, namespace, spec, 4)
    wait_ready(cluster, name, namespace)

    # status.replicas counts the pods there are (as a Deployment's does): surplus pods
    # leave after Ready already holds for the four wanted.
    def scale_reads_back():
        scale = api.get_namespaced_custom_object_scale(
            "ttsfleet.io", "v1alpha1", namespace, "ttsservices", name
        )
        return scale if (scale["spec"]["replicas"], scale["status"]["replicas"]) == (4, 4) else None

    scale = cluster.wait_for(
        scale_reads_back, timeout=30, what="the Scale to read back 4 wanted and 4 there"
    )
    pods = cluster.get("pods", "-n", namespace, "-l", scale["status"]["selector"])["items"]
    assert len([p for p in pods if not p["metadata"].get("deletionTimestamp")]) == 4
    assert_steady(cluster, name, namespace, 4, want)


def test_hpa_holds_replicas_within_its_bounds_through_scale(cluster, running_operator, namespace):
    """Scaled above autoscaling.maxReplicas by hand, the real HPA controller writes the
    TTSService's /scale back to the maximum and the Deployments follow."""
    manifest = load_sample("spot.yaml")
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, name, namespace)
    maximum = spec["autoscaling"]["maxReplicas"]

    cluster.kubectl("scale", f"tts/{name}", "-n", namespace, "--replicas", str(maximum + 3))
    cluster.wait_for(
        lambda: tts(cluster, name, namespace)["spec"]["replicas"] == maximum,
        timeout=60,
        what=f"the HPA to scale {name} back to maxReplicas {maximum}",
    )
    wait_split(cluster, name, namespace, spec, maximum)
