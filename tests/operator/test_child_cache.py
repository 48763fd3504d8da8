"""The children cache: lists answered from memory as the API server would answer them,
kept current by watch events and by the operator's own applies, so an idle pass sends
no request at all."""

import copy

from support.reconcile_passes import body, reconcile_and_keep_status
from ttsfleet_operator import labels
from ttsfleet_operator.child_cache import CachedCluster
from ttsfleet_operator.reconcile import Reconciler

SELECTOR = {labels.SERVICE: "demo", labels.MANAGED_BY: labels.MANAGER}


def watch_everything(cache: CachedCluster, fake_cluster) -> None:
    """What the watches deliver at start: every object the API server holds."""
    for (kind, _, _), obj in sorted(fake_cluster.objects.items()):
        cache.observe(None, {"kind": kind, **copy.deepcopy(obj)})


async def lists_of_every_kind(cluster) -> dict[str, list[dict]]:
    from ttsfleet_operator import child_kinds

    return {
        kind.kind: await cluster.list(kind.api_version, kind.kind, "voice", SELECTOR)
        for kind in child_kinds.CACHED
    }


def names(listing: dict[str, list[dict]]) -> dict[str, list[str]]:
    return {kind: [o["metadata"]["name"] for o in objs] for kind, objs in listing.items() if objs}


async def test_the_cache_lists_what_the_api_server_lists(fake_cluster):
    await Reconciler(fake_cluster).reconcile(body())
    await Reconciler(fake_cluster).reconcile(body(name="other"))
    cache = CachedCluster(fake_cluster)
    assert names(await lists_of_every_kind(cache)) == names(await lists_of_every_kind(fake_cluster))
    assert names(await lists_of_every_kind(cache))["Deployment"] == ["demo-on-demand"]


async def test_an_idle_pass_sends_no_request_at_all(fake_cluster):
    cache = CachedCluster(fake_cluster)
    reconciler = Reconciler(cache, now=lambda: "2026-11-21T16:00:00Z")
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    fake_cluster.requests.clear()
    for _ in range(3):
        await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    # Not even a list: the first pass listed each kind once, its applies were kept, and
    # discovery is the only request left (none here: the fake serves no Gateway API).
    assert [r for r in fake_cluster.requests if r[0] != "discovery"] == []


async def test_a_child_deleted_behind_the_operators_back_is_applied_again(fake_cluster):
    cache = CachedCluster(fake_cluster)
    reconciler = Reconciler(cache, now=lambda: "2026-11-21T16:00:00Z")
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    deleted = fake_cluster.objects.pop(("Service", "voice", "demo"))
    cache.observe("DELETED", {"kind": "Service", **deleted})
    fake_cluster.requests.clear()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.writes == [("apply", "Service/demo"), ("event", "Created")]


async def test_an_event_older_than_the_objects_own_apply_does_not_step_it_back(fake_cluster):
    cache = CachedCluster(fake_cluster)
    await cache.list("v1", "ConfigMap", "voice", SELECTOR)  # listed: empty
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "demo-engine", "namespace": "voice", "labels": dict(SELECTOR)},
        "data": {"v": "2"},
    }
    applied = await cache.apply(manifest)
    applied["metadata"]["resourceVersion"] = "7"
    cache.observe("MODIFIED", applied)
    late = copy.deepcopy(applied)
    late["metadata"]["resourceVersion"] = "6"
    late["data"] = {"v": "1"}
    cache.observe("MODIFIED", late)
    (listed,) = await cache.list("v1", "ConfigMap", "voice", SELECTOR)
    assert listed["data"] == {"v": "2"}


async def test_a_relisting_drops_what_was_deleted_while_no_watch_reported_it(fake_cluster):
    clock = [0.0]
    cache = CachedCluster(fake_cluster, relist_seconds=600, clock=lambda: clock[0])
    await Reconciler(fake_cluster).reconcile(body())
    assert await cache.list("v1", "Service", "voice", SELECTOR)
    fake_cluster.objects.pop(("Service", "voice", "demo"))  # a watch gap: no DELETED event
    assert await cache.list("v1", "Service", "voice", SELECTOR), "kept until the relisting"
    clock[0] = 600
    assert await cache.list("v1", "Service", "voice", SELECTOR) == []


async def test_a_listing_never_brings_back_what_a_watch_reported_deleted(fake_cluster):
    cache = CachedCluster(fake_cluster)
    await Reconciler(fake_cluster).reconcile(body())
    service = copy.deepcopy(fake_cluster.objects[("Service", "voice", "demo")])
    # The deletion is reported before the first listing, which was taken before it.
    cache.observe("DELETED", {"kind": "Service", **service})
    assert await cache.list("v1", "Service", "voice", SELECTOR) == []


async def test_lists_are_copies_and_carry_no_managed_fields(fake_cluster):
    cache = CachedCluster(fake_cluster)
    await Reconciler(fake_cluster).reconcile(body())
    fake_cluster.objects[("Service", "voice", "demo")]["metadata"]["managedFields"] = [{}]
    (first,) = await cache.list("v1", "Service", "voice", SELECTOR)
    assert "managedFields" not in first["metadata"]
    first["spec"] = "changed by a caller"
    (second,) = await cache.list("v1", "Service", "voice", SELECTOR)
    assert second["spec"] != "changed by a caller"


async def test_the_cache_keeps_its_own_copy_of_what_the_watch_delivered(fake_cluster):
    await Reconciler(fake_cluster).reconcile(body())
    cache = CachedCluster(fake_cluster)
    await cache.list("v1", "Service", "voice", SELECTOR)  # the first listing, done
    delivered = {
        "kind": "Service",
        **copy.deepcopy(fake_cluster.objects[("Service", "voice", "demo")]),
    }
    delivered["spec"]["sessionAffinity"] = "ClientIP"
    delivered["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    cache.observe("MODIFIED", delivered)
    delivered["spec"]["sessionAffinity"] = "None"  # whoever holds the watch body later
    (kept,) = await cache.list("v1", "Service", "voice", SELECTOR)
    assert kept["spec"]["sessionAffinity"] == "ClientIP"
    assert "managedFields" not in kept["metadata"]
