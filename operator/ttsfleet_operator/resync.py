"""One queue of work per TTSService: who asks for a pass, and which body it reconciles.

Passes are asked for by the TTSService watch when an object is new or a user changed it
(`observe`), by a child's watch event (`soon`, child_watch.py) and by the period (`pass_once`, the
level-based safety net; kopf's own timers would add a finalizer to every TTSService, so
deleting one would hang while the operator is down). For each key (namespace, name):

- at most one pass runs at a time (one worker task per key);
- every request made before a pass starts shares that pass (coalescing); a request made
  while it runs gets the next one, so none is lost;
- a pass reconciles the newest body known when it starts, never the body its requester
  held: `remember` keeps the newer of the watch's body and the object the last status
  write returned (by resourceVersion). The watch delivers a pass's own status write a
  moment after it; a pass starting in between still begins from that write, so a stale
  body never steps the canary twice (a second CanaryStarted, a step analysed twice).

A pass that fails (its outcome names a problem, or it raises) is retried by the period
with exponential back-off per object: one period after the first failure, then 2, 4, ...
periods, capped at `backoff_cap_seconds`; the first pass that succeeds resets it. A
broken child then costs an apply request every few minutes, not every period. Passes
for a change (`reconcile_now`, `soon`) are never held back: a fix must show at once.

`soon` waits `coalesce_seconds` before it asks, so a burst of child events (pods of a
Deployment going ready one by one) costs one pass.

At most `max_concurrent_passes` passes run at once, over all keys (a bulk apply of 1,000
TTSServices would otherwise start 1,000 passes together: each holds its rendering and
its requests in flight, the operator's memory peaks with them, and no pass finishes
sooner for it, the API server and the event loop being the limits). A TTSService's first
pass goes before waiting re-passes: after a bulk apply or an operator start, the services
already done ask again as their Deployments go ready, and a new one's children must not
wait behind them. So does a pass asked for by a change (`observe`): the period's and the
child watches' passes wait behind what a user just applied.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from ttsfleet_operator.cluster import Kept, not_older, resource_version

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)

# Longest wait before the period retries an object whose passes keep failing. Under the
# 10-minute window of the TTSFleetOperatorReconcileErrors alert, which must keep seeing
# the failures.
BACKOFF_CAP_SECONDS = 300.0
# Passes running at once; more only queue on the event loop and the API client's pool.
MAX_CONCURRENT_PASSES = 16
# Annotations written by tools, not by a user deciding something: no pass for them. (The
# second is kopf's diff-base, which operators before this one wrote.)
TOOL_ANNOTATIONS = frozenset(
    {"kubectl.kubernetes.io/last-applied-configuration", "ttsfleet.io/last-handled-configuration"}
)


def change_digest(body: dict) -> tuple:
    """What of a TTSService a user changes: its spec (the API server counts each change in
    the generation), its labels and its annotations (a canary action is one). Status writes,
    the operator's own, change none of it."""
    metadata = body["metadata"]
    annotations = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key not in TOOL_ANNOTATIONS
    }
    labels_and_annotations = json.dumps([metadata.get("labels") or {}, annotations], sort_keys=True)
    return metadata.get("generation"), hash(labels_and_annotations)


class PassSlots:
    """At most `size` passes at once; when one ends, a waiting urgent pass (a service's
    first, or one a change asked for) takes its slot before any waiting background pass
    (each kind first come, first served)."""

    def __init__(self, size: int):
        self.free = size
        # (urgent, background): key -> future of the pass waiting for a slot, oldest first
        self.waiting: tuple[dict[Key, asyncio.Future], dict[Key, asyncio.Future]] = ({}, {})

    async def acquire(self, key: Key, urgent: bool) -> None:
        if self.free and not any(self.waiting):
            self.free -= 1
            return
        granted = asyncio.get_running_loop().create_future()
        self.waiting[0 if urgent else 1][key] = granted
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # handed a slot as it was cancelled: hand it on
            for queue in self.waiting:
                if queue.get(key) is granted:
                    del queue[key]
            raise

    def promote(self, key: Key) -> None:
        """A background pass waiting for `key` became urgent: it goes to the urgent queue's end."""
        granted = self.waiting[1].pop(key, None)
        if granted is not None:
            self.waiting[0][key] = granted

    def release(self) -> None:
        for queue in self.waiting:
            while queue:
                granted = queue.pop(next(iter(queue)))
                if not granted.done():
                    granted.set_result(None)
                    return
        self.free += 1


def _has_version(obj: object) -> bool:
    return isinstance(obj, dict) and bool((obj.get("metadata") or {}).get("resourceVersion"))


class Resync:
    def __init__(
        self,
        reconcile: Callable[[dict], Awaitable[object]],
        period_seconds: float,
        coalesce_seconds: float = 1.0,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        max_concurrent_passes: int = MAX_CONCURRENT_PASSES,
    ):
        self.reconcile = reconcile
        self.slots = PassSlots(max_concurrent_passes)
        # keys whose first pass has started (the others' go first, PassSlots)
        self.started: set[Key] = set()
        # keys whose pass not yet started was asked for by a change (it goes first too)
        self.changed: set[Key] = set()
        self.period_seconds = period_seconds
        self.coalesce_seconds = coalesce_seconds
        self.backoff_cap_seconds = backoff_cap_seconds
        self.clock = clock
        # key -> (passes failed in a row, clock time from which the period retries it)
        self.failing: dict[Key, tuple[int, float]] = {}
        # key -> the newest body known (the watch's, or what our status write returned),
        # without managedFields (a pass reads none)
        self.bodies: dict[Key, Kept] = {}
        # key -> change_digest of the body the watch delivered last
        self.digests: dict[Key, tuple] = {}
        # key -> the pass asked for that has not started; its requesters await it
        self.pending: dict[Key, asyncio.Future] = {}
        # key -> the one task running that key's passes, one after another
        self.workers: dict[Key, asyncio.Task] = {}
        # key -> the request `soon` will make when its wait ends
        self.scheduled: dict[Key, asyncio.Task] = {}
        # every task this queue started, until it finishes (asyncio keeps only weak references)
        self.tasks: set[asyncio.Task] = set()

    @staticmethod
    def key(body: dict) -> Key:
        return body["metadata"].get("namespace", "default"), body["metadata"]["name"]

    def remember(self, body: dict) -> None:
        """Keep `body` unless the one known is newer (resourceVersion)."""
        key = self.key(body)
        current = self.bodies.get(key)
        if current is None or not_older(resource_version(body), current.version):
            metadata = {**body["metadata"]}
            metadata.pop("managedFields", None)
            self.bodies[key] = Kept({**body, "metadata": metadata})

    def forget(self, body: dict) -> None:
        key = self.key(body)
        self.bodies.pop(key, None)
        self.digests.pop(key, None)
        self.failing.pop(key, None)
        self.started.discard(key)
        self.changed.discard(key)
        pending = self.scheduled.pop(key, None)
        if pending is not None:
            pending.cancel()

    def observe(self, body: dict) -> asyncio.Future | None:
        """A TTSService as its watch delivered it: kept, and a pass asked for, ahead of
        background passes, when the object is new to this process or a user changed it
        (`change_digest`); its future, or None when no pass was asked for.

        This is all the change detection there is: kopf's create/update/resume handlers
        would need its diff-base, an annotation patched onto every TTSService after each
        change (one request more per change) and a copy of the object built on every
        watch event."""
        key = self.key(body)
        self.remember(body)
        digest = change_digest(body)
        if self.digests.get(key) == digest:
            return None
        self.digests[key] = digest
        return self._request_for_change(key)

    async def reconcile_now(self, body: dict) -> object:
        """A pass over `body`'s key (its newest known body), shared with any not yet started."""
        self.remember(body)
        return await self._request_for_change(self.key(body))

    def _request_for_change(self, key: Key) -> asyncio.Future:
        self.changed.add(key)
        self.slots.promote(key)
        return self.request(key)

    def request(self, key: Key) -> asyncio.Future:
        """Ask for a pass over `key`; the future is its outcome (None: nothing to reconcile)."""
        future = self.pending.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self.pending[key] = future
        if key not in self.workers:
            worker = asyncio.create_task(self._work(key), name=f"ttsfleet-pass-{key[0]}/{key[1]}")
            self.workers[key] = worker
            self._keep(worker)
        return future

    async def _work(self, key: Key) -> None:
        try:
            while key in self.pending:
                urgent = key not in self.started or key in self.changed
                await self.slots.acquire(key, urgent)
                try:
                    await self._pass(key)
                finally:
                    self.slots.release()
        finally:
            if self.workers.get(key) is asyncio.current_task():
                del self.workers[key]

    async def _pass(self, key: Key) -> None:
        # Taken once the pass may run: requests made while it waited for a slot share
        # it, and its body is the newest by then.
        future = self.pending.pop(key)
        self.changed.discard(key)
        kept = self.bodies.get(key)
        if kept is None or kept.deleting:
            future.set_result(None)
            return
        self.started.add(key)
        began = self.clock()
        try:
            outcome = await self.reconcile(kept.load())
        except Exception as error:
            self._record(key, began, failed=True)
            future.set_exception(error)
            return
        self._record(key, began, failed=getattr(outcome, "problem", None) is not None)
        written = getattr(outcome, "written", None)
        # Newer than the body this pass began from: the next pass begins there.
        # (Not for a key forgotten meanwhile: its TTSService is gone.)
        if key in self.bodies and _has_version(written):
            self.remember(written)
        future.set_result(outcome)

    def retry_delay(self, failures: int) -> float:
        """Seconds from a failed pass until the period retries it, after `failures` in a row."""
        cap = max(self.backoff_cap_seconds, self.period_seconds)
        return min(cap, self.period_seconds * 2 ** min(failures - 1, 32))

    def _record(self, key: Key, began: float, failed: bool) -> None:
        # Timed from the pass's start: the next period's pass of this object starts at
        # least a period later, so a one-period delay never skips it.
        if not failed:
            self.failing.pop(key, None)
            return
        failures = self.failing.get(key, (0, 0.0))[0] + 1
        self.failing[key] = (failures, began + self.retry_delay(failures))

    def backing_off(self, key: Key) -> bool:
        """The object's last passes failed and its retry time has not come."""
        failing = self.failing.get(key)
        return failing is not None and self.clock() < failing[1]

    def soon(self, key: Key) -> None:
        """A pass over `key` after `coalesce_seconds`, shared by every request until then."""
        if key in self.scheduled or key not in self.bodies:
            return
        task = asyncio.create_task(
            self._pass_soon(key), name=f"ttsfleet-resync-soon-{key[0]}/{key[1]}"
        )
        self.scheduled[key] = task
        self._keep(task)

    async def _pass_soon(self, key: Key) -> None:
        await asyncio.sleep(self.coalesce_seconds)
        if self.scheduled.get(key) is asyncio.current_task():
            del self.scheduled[key]
        try:
            await self.request(key)
        except Exception:  # the periodic pass tries again
            log.exception("resync failed", extra={"namespace": key[0], "service": key[1]})

    def _keep(self, task: asyncio.Task) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def stop(self) -> None:
        """Cancel the passes asked for or running."""
        self.scheduled.clear()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for future in self.pending.values():
            future.cancel()
        self.pending.clear()

    async def pass_once(self) -> int:
        """Reconcile every known object once, but those backing off; returns how many."""
        count = 0
        for key in list(self.bodies):
            kept = self.bodies.get(key)
            if kept is None or kept.deleting or self.backing_off(key):
                continue
            try:
                await self.request(key)
            except Exception:  # one broken object must not stop the others' resync
                log.exception("resync failed", extra={"namespace": key[0], "service": key[1]})
            count += 1
        return count

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.period_seconds)
            count = await self.pass_once()
            log.debug("resync pass done", extra={"services": count})
