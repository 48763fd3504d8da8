"""The work queue of passes: every known TTSService again each period, one pass at a time
per object, requests before a pass starts sharing it, each pass from the newest body."""

import asyncio
import copy

from ttsfleet_operator.resync import Resync


def body(name, deleting=False):
    metadata = {"name": name, "namespace": "voice"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T16:00:00Z"
    return {"metadata": metadata}


async def test_a_pass_reconciles_what_the_watch_delivered_and_skips_deleted_ones():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])

    resync = Resync(reconcile, period_seconds=30)
    resync.remember(body("a"))
    resync.remember(body("b"))
    resync.remember(body("c", deleting=True))
    resync.forget(body("b"))
    assert await resync.pass_once() == 1
    assert seen == ["a"]


async def test_one_failing_object_does_not_stop_the_others():
    seen = []

    async def reconcile(obj):
        if obj["metadata"]["name"] == "a":
            raise RuntimeError("boom")
        seen.append(obj["metadata"]["name"])

    resync = Resync(reconcile, period_seconds=30)
    resync.remember(body("a"))
    resync.remember(body("b"))
    await resync.pass_once()
    assert seen == ["b"]


async def test_passes_over_one_object_never_overlap():
    running, overlaps = 0, 0

    async def reconcile(obj):
        nonlocal running, overlaps
        running += 1
        overlaps += running > 1
        await asyncio.sleep(0.01)
        running -= 1

    resync = Resync(reconcile, period_seconds=30)
    resync.remember(body("a"))
    await asyncio.gather(*(resync.reconcile_now(body("a")) for _ in range(5)))
    assert overlaps == 0


async def test_the_latest_body_wins_and_is_a_copy():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"].get("generation"))

    resync = Resync(reconcile, period_seconds=30)
    first = body("a")
    resync.remember(first)
    first["metadata"]["generation"] = 99  # the caller's later mutation must not leak in
    newer = body("a")
    newer["metadata"]["generation"] = 2
    resync.remember(newer)
    await resync.pass_once()
    assert seen == [2]


class Written:
    """What Reconciler.reconcile returns, as far as Resync looks: the status write's result."""

    def __init__(self, written):
        self.written = written


def versioned(name, version, status=None):
    obj = {**body(name), "metadata": {**body(name)["metadata"], "resourceVersion": version}}
    if status is not None:
        obj["status"] = status
    return obj


async def test_a_pass_asked_for_while_another_runs_begins_from_that_pass_status_write():
    # The create handler's pass writes the status (Canary started) while the period asks
    # for a pass holding the same, older body: that pass must begin from the written
    # object, or it would step the canary from the old status again (a second CanaryStarted).
    seen = []
    gate = asyncio.Event()

    async def reconcile(obj):
        seen.append((obj["metadata"]["resourceVersion"], obj.get("status")))
        if len(seen) == 1:
            await gate.wait()
            return Written(versioned("a", "2", {"x": 1}))
        return Written(None)

    resync = Resync(reconcile, period_seconds=30)
    created = versioned("a", "1")
    handler = asyncio.create_task(resync.reconcile_now(created))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(resync.pass_once())
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(handler, waiting)
    assert seen == [("1", None), ("2", {"x": 1})]
    # The watch delivers the write late, then a body kopf's handler still holds: neither
    # steps the known body back.
    resync.remember(versioned("a", "2", {"x": 1}))
    await resync.reconcile_now(copy.deepcopy(created))
    assert seen[-1] == ("2", {"x": 1})
    # A newer body the watch delivered (a spec change) is reconciled as delivered.
    await resync.reconcile_now(versioned("a", "3"))
    assert seen[-1] == ("3", None)


async def test_requests_soon_after_one_another_share_one_pass_over_the_latest_body():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"].get("generation"))

    resync = Resync(reconcile, period_seconds=600, coalesce_seconds=0.01)
    resync.remember(body("a"))
    for generation in range(5):
        resync.remember(
            {**body("a"), "metadata": {**body("a")["metadata"], "generation": generation}}
        )
        resync.soon(("voice", "a"))
    await asyncio.gather(*resync.tasks)
    assert seen == [4]


async def test_a_request_while_its_pass_runs_gets_a_pass_of_its_own():
    # The running pass may have listed the children before the change this request reports.
    seen = []
    started, release = asyncio.Event(), asyncio.Event()

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])
        started.set()
        await release.wait()

    resync = Resync(reconcile, period_seconds=600, coalesce_seconds=0.01)
    resync.remember(body("a"))
    resync.soon(("voice", "a"))
    await started.wait()
    resync.soon(("voice", "a"))
    resync.soon(("voice", "a"))
    release.set()
    while resync.tasks:
        await asyncio.gather(*resync.tasks)
    assert seen == ["a", "a"]


async def test_no_pass_for_an_unknown_forgotten_or_deleting_object():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])

    resync = Resync(reconcile, period_seconds=600, coalesce_seconds=0.01)
    resync.soon(("voice", "unknown"))
    resync.remember(body("gone"))
    resync.soon(("voice", "gone"))
    resync.forget(body("gone"))
    resync.remember(body("deleting", deleting=True))
    resync.soon(("voice", "deleting"))
    await asyncio.gather(*resync.tasks, return_exceptions=True)
    assert seen == []


async def test_a_failing_pass_requested_soon_is_logged_and_the_next_request_still_runs():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])
        if len(seen) == 1:
            raise RuntimeError("boom")

    resync = Resync(reconcile, period_seconds=600, coalesce_seconds=0.01)
    resync.remember(body("a"))
    resync.soon(("voice", "a"))
    await asyncio.gather(*resync.tasks)
    resync.soon(("voice", "a"))
    await asyncio.gather(*resync.tasks)
    assert seen == ["a", "a"]


async def test_stop_cancels_the_passes_requested_soon():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])

    resync = Resync(reconcile, period_seconds=600, coalesce_seconds=60)
    resync.remember(body("a"))
    resync.soon(("voice", "a"))
    await resync.stop()
    assert seen == [] and not resync.tasks and not resync.scheduled


async def test_requests_queued_behind_a_running_pass_share_one_pass_from_its_write():
    # More requests queue behind a running pass than one write supersedes: the create
    # handler's pass (version 1) writes 2; the period's request and a child's change both
    # still hold version 1. They share one pass, which begins from 2; nothing steps the
    # canary from version 1's status again (a second CanaryStarted, seen in e2e).
    seen = []
    gate = asyncio.Event()

    async def reconcile(obj):
        version = obj["metadata"]["resourceVersion"]
        seen.append(version)
        if len(seen) == 1:
            await gate.wait()
        newer = str(int(version) + 1)
        return Written(versioned("a", newer, {"v": newer}))

    resync = Resync(reconcile, period_seconds=30)
    created = versioned("a", "1")
    first = asyncio.create_task(resync.reconcile_now(created))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(resync.reconcile_now(copy.deepcopy(created))) for _ in range(2)]
    await asyncio.sleep(0)
    gate.set()
    outcomes = await asyncio.gather(first, *queued)
    assert seen == ["1", "2"]
    assert outcomes[1] is outcomes[2], "the queued requests share one pass"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_persistently_failing_pass_backs_off_and_posts_one_event_per_problem(fake_cluster):
    from ttsfleet_operator.reconcile import Reconciler

    clock = FakeClock()
    reconciler = Reconciler(fake_cluster, now=lambda: "2026-11-21T16:00:00Z")
    passes = []

    async def reconcile(obj):
        passes.append(clock.now)
        outcome = await reconciler.reconcile(obj)
        if outcome.written is not None:  # the watch delivers the status write
            resync.remember({**obj, "status": outcome.written["status"]})
        return outcome

    resync = Resync(reconcile, period_seconds=30, backoff_cap_seconds=240, clock=clock)
    resync.remember(
        {
            "apiVersion": "ttsfleet.io/v1alpha1",
            "kind": "TTSService",
            "metadata": {"name": "demo", "namespace": "voice", "uid": "uid-demo", "generation": 1},
            "spec": {"model": {"size": "1.7B", "variant": "CustomVoice"}},
        }
    )
    fake_cluster.fail_apply_kinds.add("Deployment")

    async def periods(until: float):
        while clock.now < until:
            await resync.pass_once()
            clock.now += 30

    def warnings():
        return [reason for type_, reason, _ in fake_cluster.events if type_ == "Warning"]

    await periods(600)
    # Retried 1, 2, 4 periods after each failure, then every 240 s (the cap), not every period.
    assert passes == [0, 30, 90, 210, 450]
    assert [b - a for a, b in zip(passes, passes[1:], strict=False)] == [
        resync.retry_delay(n) for n in (1, 2, 3, 4)
    ]
    assert warnings() == ["ApplyFailed"], "the same problem is reported once, not per pass"

    # Fixed: the retry due at 690 succeeds, and the period runs every 30 s again.
    fake_cluster.fail_apply_kinds.clear()
    await periods(780)
    assert passes[5:] == [690, 720, 750]
    assert warnings() == ["ApplyFailed"]

    # A new failure is a new problem: reported once more, and the back-off starts afresh.
    fake_cluster.fail_apply_kinds.add("Service")
    del fake_cluster.objects[("Service", "voice", "demo")]
    await periods(900)
    assert passes[8:] == [780, 810, 870]
    assert warnings() == ["ApplyFailed", "ApplyFailed"]


async def test_a_change_is_reconciled_at_once_even_while_backing_off():
    seen = []

    class Failed:
        problem = "ApplyFailed"

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])
        return Failed()

    clock = FakeClock()
    resync = Resync(reconcile, period_seconds=30, clock=clock)
    resync.remember(body("a"))
    await resync.pass_once()
    clock.now = 10
    assert await resync.pass_once() == 0 and resync.backing_off(("voice", "a"))
    await resync.reconcile_now(body("a"))  # kopf's update handler: a spec change
    assert seen == ["a", "a"]


async def test_at_most_the_configured_number_of_passes_run_at_once():
    running, most = 0, 0
    release = asyncio.Event()

    async def reconcile(obj):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1

    resync = Resync(reconcile, period_seconds=30, max_concurrent_passes=3)
    passes = [asyncio.ensure_future(resync.reconcile_now(body(f"s{i}"))) for i in range(10)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert running == 3
    release.set()
    await asyncio.gather(*passes)
    assert most == 3


async def test_a_request_made_while_its_pass_waits_for_a_slot_shares_that_pass():
    seen = []
    release = asyncio.Event()

    async def reconcile(obj):
        seen.append((obj["metadata"]["name"], obj["metadata"].get("generation")))
        await release.wait()

    resync = Resync(reconcile, period_seconds=30, max_concurrent_passes=1)
    busy = asyncio.ensure_future(resync.reconcile_now(body("busy")))
    await asyncio.sleep(0)
    first = asyncio.ensure_future(resync.reconcile_now(body("a")))
    await asyncio.sleep(0)
    newer = {**body("a"), "metadata": {**body("a")["metadata"], "generation": 2}}
    second = asyncio.ensure_future(resync.reconcile_now(newer))
    release.set()
    await asyncio.gather(busy, first, second)
    # One pass over "a", from the body newest when its slot came.
    assert seen == [("busy", None), ("a", 2)]


async def test_a_new_services_first_pass_goes_before_waiting_re_passes():
    # A bulk apply (or an operator start) queues hundreds of first passes while the
    # services already done ask for re-passes (their Deployments going ready): a new
    # service's children must not wait behind those.
    seen = []
    release = asyncio.Event()

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == "busy":
            await release.wait()

    resync = Resync(reconcile, period_seconds=30, max_concurrent_passes=1)
    await resync.reconcile_now(body("old"))  # its first pass is done
    busy = asyncio.ensure_future(resync.reconcile_now(body("busy")))
    await asyncio.sleep(0)
    again = resync.request(("voice", "old"))  # its Deployment went ready
    await asyncio.sleep(0)
    new = asyncio.ensure_future(resync.reconcile_now(body("new")))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(busy, again, new)
    assert seen == ["old", "busy", "new", "old"]


async def test_a_pass_cancelled_while_it_waits_for_a_slot_gives_no_slot_away():
    seen = []
    release = asyncio.Event()

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == "busy":
            await release.wait()

    resync = Resync(reconcile, period_seconds=30, max_concurrent_passes=1)
    busy = asyncio.ensure_future(resync.reconcile_now(body("busy")))
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(resync.reconcile_now(body("gone")))
    await asyncio.sleep(0)
    resync.workers[("voice", "gone")].cancel()
    await asyncio.sleep(0)
    later = asyncio.ensure_future(resync.reconcile_now(body("later")))
    release.set()
    await asyncio.gather(busy, later)
    waiting.cancel()
    assert seen == ["busy", "later"]
    # The one slot is free again: a next pass runs at once.
    await resync.reconcile_now(body("next"))
    assert seen[-1] == "next"


async def test_a_spec_change_goes_before_waiting_background_passes():
    # Under load the period's and the child watches' passes queue for the slots; a change
    # someone just applied (kopf's update handler) is what they wait for.
    seen = []
    release = asyncio.Event()

    async def reconcile(obj):
        seen.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == "busy":
            await release.wait()

    resync = Resync(reconcile, period_seconds=30, max_concurrent_passes=1)
    for name in ("a", "c"):
        await resync.reconcile_now(body(name))  # first passes done
    seen.clear()
    busy = asyncio.ensure_future(resync.reconcile_now(body("busy")))
    await asyncio.sleep(0)
    background = [resync.request(("voice", "c")), resync.request(("voice", "a"))]
    await asyncio.sleep(0)
    changed = asyncio.ensure_future(resync.reconcile_now(body("a")))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(busy, changed, *background)
    assert seen == ["busy", "a", "c"]


def watched(version, generation, annotations=None, labels=None):
    """The TTSService "a" as its watch delivers it."""
    obj = versioned("a", str(version))
    obj["metadata"].update(generation=generation, annotations=annotations or {})
    obj["metadata"]["labels"] = labels or {}
    return obj


async def test_the_watch_asks_for_a_pass_for_a_new_or_changed_service_never_for_a_status_write():
    seen = []

    async def reconcile(obj):
        seen.append(obj["metadata"]["resourceVersion"])

    resync = Resync(reconcile, period_seconds=30)
    await resync.observe(watched(1, 1))  # new to this process (created, or listed at start)
    assert resync.observe(watched(2, 1)) is None  # the pass's own status write
    await resync.observe(watched(3, 2))  # a spec change
    await resync.observe(watched(4, 2, annotations={"ttsfleet.io/canary-action": "promote"}))
    await resync.observe(watched(5, 2, {"ttsfleet.io/canary-action": "promote"}, {"team": "x"}))
    kubectl = {
        "ttsfleet.io/canary-action": "promote",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }
    assert resync.observe(watched(6, 2, kubectl, {"team": "x"})) is None
    assert seen == ["1", "3", "4", "5"]
    resync.forget(watched(6, 2))
    await resync.observe(watched(7, 1))  # deleted and created again by the same name
    assert seen[-1] == "7"


async def test_a_pass_gets_the_body_without_managed_fields():
    seen = []

    async def reconcile(obj):
        seen.append(obj)

    resync = Resync(reconcile, period_seconds=30)
    delivered = watched(1, 1)
    delivered["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    resync.remember(delivered)
    await resync.pass_once()
    assert "managedFields" not in seen[0]["metadata"]
    assert seen[0]["metadata"]["generation"] == 1
    assert "managedFields" in delivered["metadata"]  # the watch's body is left as it was
