"""The model cache against a real API server: the operator creates the claim and the fill
Job, the runtime Deployment (and the pre-warming DaemonSet) appears only once the real
job controller has completed the Job, a new revision fills a new cache while the pods
stay on the old one and moves them after, a failed fill says why, and a cache deleted
by hand is filled again.

kwok runs no storage provisioner and no containers, so two parts of a real cluster are
played here, each where a real component would act and through the same API:
- `provision` is the external provisioner: it creates a PersistentVolume bound to a
  Pending claim (the real PV controller then binds them, the real scheduler places the
  fill pod, kwok runs it to Succeeded, and the real job controller completes the Job);
- `fill_exits` is the kubelet of a fill whose `ttsfleet fetch` exited with a code: it
  writes the pod's terminated status (the real job controller then applies the Job's
  podFailurePolicy and fails it). tests/model_cache covers what `fetch` itself does.
"""

from __future__ import annotations

import json
import time

import pytest

from support.operator_fixtures import children, condition, tts
from support.polling import wait_for
from ttsfleet_runtime.model_cache import FAILURE_BY_CODE

pytestmark = pytest.mark.timeout(240)

NAME = "tts-cached"
WITHIN = 60


def manifest(revision: str, replicas: int = 1, prewarm: str = "None") -> dict:
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": NAME},
        "spec": {
            "model": {
                "size": "0.6B",
                "variant": "Base",
                "revision": revision,
                "cache": {"enabled": True, "size": "10Gi", "prewarm": prewarm},
            },
            "gpu": {"class": "l4"},
            "replicas": replicas,
            "runtime": {"resources": {"cpu": "2", "memory": "16Gi"}},
        },
    }


@pytest.fixture
def provision(cluster, namespace):
    """Creates a PersistentVolume for a claim, as an external provisioner would; every
    volume it made is deleted afterwards (they are cluster-scoped)."""
    made: list[str] = []

    def provide(claim_name: str) -> None:
        claim = cluster.get("pvc", claim_name, "-n", namespace)
        volume = f"{namespace}-{len(made)}"
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
                    "accessModes": claim["spec"]["accessModes"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/{volume}"},
                    "claimRef": {
                        "namespace": namespace,
                        "name": claim_name,
                        "uid": claim["metadata"]["uid"],
                    },
                },
            }
        )
        made.append(volume)

    yield provide
    for volume in made:
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)


def fill_exits(cluster, namespace: str, job_name: str, exit_code: int) -> None:
    """The fill pod's container exited with `exit_code`: its status as a kubelet writes it."""
    pods = wait_for(
        lambda: cluster.get(
            "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job_name}"
        )["items"],
        timeout=WITHIN,
        what=f"a pod of Job {job_name}",
    )
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": exit_code, "reason": "Error", "startedAt": now, "finishedAt": now}
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "fetch",
                "image": pods[0]["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    cluster.kubectl(
        "patch",
        "pod",
        pods[0]["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def model_cache(cluster, namespace: str) -> dict:
    return (tts(cluster, NAME, namespace).get("status") or {}).get("modelCache") or {}


def cache_shows(cluster, namespace: str, **expected) -> dict:
    def shows():
        cache = model_cache(cluster, namespace)
        return cache if all(cache.get(k) == v for k, v in expected.items()) else None

    try:
        return wait_for(shows, timeout=WITHIN, what=f"status.modelCache {expected}")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nstatus: {tts(cluster, NAME, namespace).get('status')}"
        ) from None


def mounted_claims(cluster, namespace: str) -> set[str]:
    return {
        volume["persistentVolumeClaim"]["claimName"]
        for deployment in children(cluster, "deployments", NAME, namespace)
        for volume in deployment["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in volume
    }


def prewarmed_claims(cluster, namespace: str) -> set[str]:
    return {
        volume["persistentVolumeClaim"]["claimName"]
        for daemonset in children(cluster, "daemonsets", NAME, namespace)
        for volume in daemonset["spec"]["template"]["spec"]["volumes"]
    }


def claim_names(cluster, namespace: str) -> set[str]:
    return {c["metadata"]["name"] for c in children(cluster, "pvc", NAME, namespace)}


def test_pods_wait_for_the_cache_and_move_to_a_new_revision_once_it_is_filled(
    cluster, running_operator, namespace, provision
):
    cluster.apply(manifest("v1", prewarm="PageCache"), "-n", namespace)
    # No volume yet (no provisioner has acted): the claim is Pending, and so are the pods.
    first = cache_shows(cluster, namespace, phase="Pending", reason="ClaimPending")["claimName"]
    assert claim_names(cluster, namespace) == {first}
    assert [j["metadata"]["name"] for j in children(cluster, "jobs", NAME, namespace)] == [first]
    assert children(cluster, "deployments", NAME, namespace) == []
    assert children(cluster, "daemonsets", NAME, namespace) == []
    ready = condition(tts(cluster, NAME, namespace), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ModelCachePending")

    provision(first)
    cache_shows(cluster, namespace, phase="Ready", servingClaimName=first)
    wait_for(lambda: mounted_claims(cluster, namespace) == {first}, timeout=WITHIN, what="pods")
    assert prewarmed_claims(cluster, namespace) == {first}
    wait_for(
        lambda: (condition(tts(cluster, NAME, namespace), "Ready") or {}).get("status") == "True",
        timeout=WITHIN,
        what="TTSService Ready",
    )

    cluster.apply(manifest("v2", prewarm="PageCache"), "-n", namespace)
    second = cache_shows(cluster, namespace, phase="Pending", servingClaimName=first)["claimName"]
    assert second != first
    assert claim_names(cluster, namespace) == {first, second}
    # The pods stay on the filled cache while the new one waits for its volume.
    time.sleep(3)
    assert mounted_claims(cluster, namespace) == {first}
    assert prewarmed_claims(cluster, namespace) == {first}

    provision(second)
    cache_shows(cluster, namespace, phase="Ready", servingClaimName=second)
    wait_for(lambda: mounted_claims(cluster, namespace) == {second}, timeout=WITHIN, what="move")
    assert prewarmed_claims(cluster, namespace) == {second}
    # The old cache goes once no pod mounts it (PVC protection holds it until then).
    wait_for(
        lambda: claim_names(cluster, namespace) == {second},
        timeout=WITHIN,
        what=f"claim {first} deleted",
    )


def test_a_fill_that_cannot_succeed_fails_the_cache_with_its_reason(
    cluster, running_operator, namespace
):
    cluster.apply(manifest("no-such-revision"), "-n", namespace)
    claim = cache_shows(cluster, namespace, phase="Pending", reason="ClaimPending")["claimName"]
    fill_exits(cluster, namespace, claim, 4)
    failure = FAILURE_BY_CODE[4]
    cache = cache_shows(cluster, namespace, phase="Failed", reason=failure.reason)
    assert failure.message in cache["message"]
    obj = tts(cluster, NAME, namespace)
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ModelCacheFailed")
    assert condition(obj, "Ready")["reason"] == "ModelCacheFailed"
    assert children(cluster, "deployments", NAME, namespace) == []


def test_a_cache_deleted_by_hand_is_created_and_filled_again(
    cluster, running_operator, namespace, provision
):
    # No runtime pod mounts it (replicas 0): the deletion takes effect once the operator
    # deleted the fill Job, whose finished pod PVC protection counts as a user too.
    cluster.apply(manifest("v1", replicas=0), "-n", namespace)
    claim = cache_shows(cluster, namespace, phase="Pending")["claimName"]
    provision(claim)
    cache_shows(cluster, namespace, phase="Ready")
    old_uid = cluster.get("pvc", claim, "-n", namespace)["metadata"]["uid"]

    cluster.kubectl("delete", "pvc", claim, "-n", namespace, "--wait=false")
    recreated = wait_for(
        lambda: next(
            (
                c
                for c in children(cluster, "pvc", NAME, namespace)
                if c["metadata"]["uid"] != old_uid
            ),
            None,
        ),
        timeout=WITHIN,
        what=f"claim {claim} created again",
    )
    assert recreated["metadata"]["name"] == claim
    # The completed Job filled the claim that is gone: it is replaced, and the cache waits.
    cache_shows(cluster, namespace, phase="Pending", reason="ClaimPending")
    provision(claim)
    cache_shows(cluster, namespace, phase="Ready")
