"""Child events: which ask for a pass over their TTSService, and which do not."""

import asyncio
import copy

import kopf
import pytest

from ttsfleet_operator import child_kinds, handlers, labels
from ttsfleet_operator.child_cache import CachedCluster
from ttsfleet_operator.child_watch import ChildWatch
from ttsfleet_operator.resync import Resync

OWNER = ("voice", "demo")


def deployment(ready=0, uid="d-1", owner_kind="TTSService", **status):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "demo-stable-on-demand",
            "namespace": "voice",
            "uid": uid,
            "generation": 1,
            "labels": labels.service_labels("demo"),
            "ownerReferences": [
                {
                    "apiVersion": "ttsfleet.io/v1alpha1",
                    "kind": owner_kind,
                    "name": "demo",
                    "uid": "uid-demo",
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": 3},
        "status": {
            "observedGeneration": 1,
            "replicas": 3,
            "updatedReplicas": 3,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "False",
                    "reason": "MinimumReplicasUnavailable",
                    "message": "Deployment does not have minimum availability.",
                    "lastUpdateTime": "2026-11-21T16:00:00Z",
                    "lastTransitionTime": "2026-11-21T16:00:00Z",
                }
            ],
            **status,
        },
    }


def seen(watch, child):
    """The watch has seen `child` already (the listing at start, or an earlier event)."""
    watch.owner_to_refresh(None, child)
    return watch


def test_a_child_seen_for_the_first_time_asks_for_a_pass():
    # At start the owner's pass may have read it before this watch listed it.
    assert ChildWatch().owner_to_refresh(None, deployment()) == OWNER
    assert ChildWatch().owner_to_refresh("ADDED", deployment()) == OWNER


def test_the_same_status_again_asks_for_nothing():
    watch = seen(ChildWatch(), deployment(ready=2))
    assert watch.owner_to_refresh("MODIFIED", deployment(ready=2)) is None


def test_pods_becoming_ready_ask_for_a_pass_over_the_owner():
    watch = seen(ChildWatch(), deployment(ready=0))
    assert watch.owner_to_refresh("MODIFIED", deployment(ready=2)) == OWNER


def test_pods_stopping_being_ready_ask_for_a_pass_over_the_owner():
    watch = seen(ChildWatch(), deployment(ready=3))
    assert watch.owner_to_refresh("MODIFIED", deployment(ready=1)) == OWNER


@pytest.mark.parametrize(
    "field",
    ["replicas", "readyReplicas", "availableReplicas", "updatedReplicas", "observedGeneration"],
)
def test_each_status_field_the_tts_service_status_reads_asks_for_a_pass(field):
    before = deployment(ready=1)
    watch = seen(ChildWatch(), before)
    after = copy.deepcopy(before)
    after["status"][field] = 7
    assert watch.owner_to_refresh("MODIFIED", after) == OWNER


def test_a_condition_changing_reason_asks_for_a_pass_but_its_timestamps_alone_do_not():
    before = deployment()
    watch = seen(ChildWatch(), before)
    touched = copy.deepcopy(before)
    touched["status"]["conditions"][0]["lastUpdateTime"] = "2026-11-21T16:05:00Z"
    assert watch.owner_to_refresh("MODIFIED", touched) is None
    stuck = copy.deepcopy(touched)
    stuck["status"]["conditions"].append(
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": "stuck",
        }
    )
    assert watch.owner_to_refresh("MODIFIED", stuck) == OWNER


def test_the_operators_own_patch_to_a_child_asks_for_no_pass():
    # A pass applies metadata and spec (annotations, replicas, a new generation): were
    # that to ask for another pass, which applies again, passes would feed themselves.
    before = deployment(ready=3)
    watch = seen(ChildWatch(), before)
    patched = copy.deepcopy(before)
    patched["metadata"]["generation"] = 2
    patched["metadata"]["resourceVersion"] = "99"
    patched["metadata"]["annotations"] = {labels.RENDERED_HASH: "new"}
    patched["metadata"]["managedFields"] = [{"manager": "ttsfleet-operator"}]
    patched["spec"]["replicas"] = 4
    assert watch.owner_to_refresh("MODIFIED", patched) is None
    # The Deployment controller's answer (observedGeneration) is a status change: one pass.
    observed = copy.deepcopy(patched)
    observed["status"]["observedGeneration"] = 2
    assert watch.owner_to_refresh("MODIFIED", observed) == OWNER
    assert watch.owner_to_refresh("MODIFIED", copy.deepcopy(observed)) is None


def test_a_deleted_child_asks_for_a_pass_even_unseen_so_it_is_recreated_soon():
    assert ChildWatch().owner_to_refresh("DELETED", deployment()) == OWNER
    watch = seen(ChildWatch(), deployment(uid="d-2"))
    assert watch.owner_to_refresh("DELETED", deployment(uid="d-2")) == OWNER
    assert "d-2" not in watch.digests


def test_a_relisting_after_a_watch_reconnect_compares_like_any_event():
    watch = seen(ChildWatch(), deployment(ready=0))
    assert watch.owner_to_refresh(None, deployment(ready=3)) == OWNER


def test_a_child_no_tts_service_controls_asks_for_nothing():
    watch = ChildWatch()
    assert watch.owner_to_refresh(None, deployment(owner_kind="ReplicaSet")) is None
    assert watch.owner_to_refresh("MODIFIED", deployment(ready=3, owner_kind="ReplicaSet")) is None
    assert watch.owner_to_refresh("DELETED", deployment(owner_kind="ReplicaSet")) is None


def registered_watches() -> dict:
    """The watch handlers handlers.register puts on a registry, by group/plural."""
    registry = kopf.OperatorRegistry()
    handlers.register(registry, resync_seconds=600, kubeconfig=None)
    return {
        f"{handler.selector.group}/{handler.selector.plural}": handler
        for handler in registry._watching.get_all_handlers()
    }


def test_the_operator_watches_the_tts_services_and_exactly_the_declared_children():
    # kopf watches the TTSServices only; the children have watches of the operator's own.
    assert set(registered_watches()) == {"ttsfleet.io/ttsservices"}
    watches = handlers.child_watches(api=None, namespaces=["voice", "team"], handle=print)
    assert {(w.kind.kind, w.namespace) for w in watches} == {
        (kind.kind, namespace) for kind in child_kinds.WATCHED for namespace in ("voice", "team")
    }
    assert {w.selector for w in watches} == {
        f"{labels.MANAGED_BY}={labels.MANAGER},{labels.SERVICE}"
    }
    everywhere = handlers.child_watches(api=None, namespaces=None, handle=print)
    assert {w.namespace for w in everywhere} == {None}


async def test_a_child_event_schedules_one_coalesced_pass_over_its_owner():
    passes = []

    async def reconcile(obj):
        passes.append(obj["metadata"]["name"])

    memo = kopf.Memo()
    memo.resync = Resync(reconcile, period_seconds=600, coalesce_seconds=0.01)
    memo.child_watch = ChildWatch()
    memo.cluster = CachedCluster(cluster=None)
    memo.resync.remember({"metadata": {"name": "demo", "namespace": "voice"}})
    handlers.child_changed(memo, None, deployment(ready=0))
    for ready in (1, 2, 3):
        handlers.child_changed(memo, "MODIFIED", deployment(ready=ready))
    await asyncio.gather(*memo.resync.tasks)
    assert passes == ["demo"]
    # The same events keep the cache the pass lists children from.
    (cached,) = memo.cluster.objects[("voice", "Deployment")].values()
    assert cached.load()["status"]["readyReplicas"] == 3


def service_child(uid="s-1", **status) -> dict:
    child = deployment(uid=uid)
    child.update(apiVersion="v1", kind="Service", spec={"ports": [{"port": 80}]}, status=status)
    child["metadata"]["name"] = "demo"
    return child


def test_a_deleted_child_of_any_kind_asks_for_a_pass_over_its_owner():
    # The pass re-creates it at once, not at the next period.
    watch = seen(ChildWatch(), service_child())
    assert watch.owner_to_refresh("DELETED", service_child()) == OWNER


def test_events_of_a_kind_whose_status_nothing_reads_ask_for_nothing_until_it_is_deleted():
    # Services, ConfigMaps, PDBs, HPAs: the HPA controller rewrites its status every
    # 15 s; a pass for each would cost a pass per HPA per 15 s and change nothing.
    watch = ChildWatch()
    assert watch.owner_to_refresh(None, service_child()) is None
    assert watch.owner_to_refresh("MODIFIED", service_child(loadBalancer={"x": 1})) is None


def cache_child(kind: str, status: dict, deleting: bool = False) -> dict:
    child = deployment(uid=f"{kind}-1")
    child["kind"] = kind
    child["status"] = status
    if deleting:
        child["metadata"]["deletionTimestamp"] = "2026-11-21T16:05:00Z"
    return child


def test_a_fill_job_running_completing_or_failing_asks_for_a_pass():
    watch = ChildWatch()
    watch.owner_to_refresh("ADDED", cache_child("Job", {"active": 1}))
    assert watch.owner_to_refresh("MODIFIED", cache_child("Job", {"active": 1})) is None
    assert (
        watch.owner_to_refresh("MODIFIED", cache_child("Job", {"active": 1, "ready": 1})) == OWNER
    )
    done = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    assert watch.owner_to_refresh("MODIFIED", cache_child("Job", done)) == OWNER


def test_a_claim_binding_or_being_deleted_asks_for_a_pass():
    watch = ChildWatch()
    watch.owner_to_refresh("ADDED", cache_child("PersistentVolumeClaim", {"phase": "Pending"}))
    bound = cache_child("PersistentVolumeClaim", {"phase": "Bound"})
    assert watch.owner_to_refresh("MODIFIED", bound) == OWNER
    deleting = cache_child("PersistentVolumeClaim", {"phase": "Bound"}, deleting=True)
    assert watch.owner_to_refresh("MODIFIED", deleting) == OWNER


def test_the_model_cache_kinds_are_watched():
    assert {child_kinds.JOB, child_kinds.PERSISTENT_VOLUME_CLAIM} <= set(child_kinds.WATCHED)
