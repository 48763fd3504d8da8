"""The level-based safety net: every TTSService is reconciled again each period.

kopf's own timers would add a finalizer to every TTSService (so deleting one
would hang while the operator is down). This loop needs none: it reconciles the
latest body kopf's watch delivered (`remember`/`forget`), under the same
per-object lock the change handlers take, so passes never overlap.

A pass that waited on the lock may hold the very body the pass before it started
from, whose status that pass has since replaced (the watch delivers the write a
moment later). Stepping the canary again from that stale status would repeat the
transition (a second CanaryStarted, a step analysed twice): so a body with a
resourceVersion some status write was computed from is swapped for the object the
latest write returned. Every such version is older than that object: writes to one
object are serialised by its lock. Several passes may queue on the lock holding the
same old body (the change handler's, the period's, one a child's change asked
for), so every version a write superseded is kept, not only the last one.

A pass that fails (its outcome names a problem, or it raises) is retried by the period
with exponential back-off per object: one period after the first failure, then 2, 4, ...
periods, capped at `backoff_cap_seconds`; the first pass that succeeds resets it. A
broken child then costs an apply request every few minutes, not every period. Passes
for a change (kopf's create/update/resume handlers, `soon`) are never held back: a
fix must show at once.

Between periods, `soon` asks for one object's pass shortly (its child Deployments'
status changed, or one was deleted: child_watch.py). Requests within
`coalesce_seconds` of the first share one pass, which lists the children afresh
when it starts; a request after it has started gets a pass of its own, so none is lost.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)

# Superseded versions kept per object: far more than passes ever queue on one lock.
SUPERSEDED_KEPT = 64
# Longest wait before the period retries an object whose passes keep failing. Under the
# 10-minute window of the TTSFleetOperatorReconcileErrors alert, which must keep seeing
# the failures.
BACKOFF_CAP_SECONDS = 300.0


class Resync:
    def __init__(
        self,
        reconcile: Callable[[dict], Awaitable[object]],
        period_seconds: float,
        coalesce_seconds: float = 1.0,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.reconcile = reconcile
        self.period_seconds = period_seconds
        self.coalesce_seconds = coalesce_seconds
        self.backoff_cap_seconds = backoff_cap_seconds
        self.clock = clock
        # key -> (passes failed in a row, clock time from which the period retries it)
        self.failing: dict[Key, tuple[int, float]] = {}
        self.bodies: dict[Key, dict] = {}
        self.locks: collections.defaultdict[Key, asyncio.Lock] = collections.defaultdict(
            asyncio.Lock
        )
        # key -> (resourceVersions status writes were computed from, the object the latest returned)
        self.superseded: dict[Key, tuple[collections.deque[str], dict]] = {}
        # key -> the pass `soon` scheduled that has not started yet
        self.scheduled: dict[Key, asyncio.Task] = {}
        # every pass `soon` started, until it finishes (asyncio keeps only weak references)
        self.tasks: set[asyncio.Task] = set()

    @staticmethod
    def key(body: dict) -> Key:
        return body["metadata"].get("namespace", "default"), body["metadata"]["name"]

    def remember(self, body: dict) -> None:
        self.bodies[self.key(body)] = copy.deepcopy(body)

    def forget(self, body: dict) -> None:
        key = self.key(body)
        self.bodies.pop(key, None)
        self.locks.pop(key, None)
        self.superseded.pop(key, None)
        self.failing.pop(key, None)
        pending = self.scheduled.pop(key, None)
        if pending is not None:
            pending.cancel()

    async def reconcile_locked(self, body: dict) -> object:
        key = self.key(body)
        async with self.locks[key]:
            started = version = body["metadata"].get("resourceVersion")
            stale, newest = self.superseded.get(key, ((), None))
            if version is not None and version in stale:
                body = copy.deepcopy(newest)
                version = body["metadata"].get("resourceVersion")
            began = self.clock()
            try:
                outcome = await self.reconcile(body)
            except Exception:
                self._record(key, began, failed=True)
                raise
            self._record(key, began, failed=getattr(outcome, "problem", None) is not None)
            written = getattr(outcome, "written", None)
            if (
                version is not None
                and isinstance(written, dict)
                and (written.get("metadata") or {}).get("resourceVersion")
            ):
                older = collections.deque(stale, maxlen=SUPERSEDED_KEPT)
                older.extend(v for v in dict.fromkeys((started, version)) if v not in older)
                self.superseded[key] = (older, copy.deepcopy(written))
            return outcome

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
        """One pass over `key` after `coalesce_seconds`, shared by every request until it starts."""
        if key in self.scheduled or key not in self.bodies:
            return
        task = asyncio.create_task(
            self._pass_soon(key), name=f"ttsfleet-resync-soon-{key[0]}/{key[1]}"
        )
        self.scheduled[key] = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _pass_soon(self, key: Key) -> None:
        await asyncio.sleep(self.coalesce_seconds)
        # From here on, a new request schedules another pass: this one may list the
        # children before the change that request reports.
        if self.scheduled.get(key) is asyncio.current_task():
            del self.scheduled[key]
        body = self.bodies.get(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        try:
            await self.reconcile_locked(body)
        except Exception:  # the periodic pass tries again
            log.exception("resync failed", extra={"namespace": key[0], "service": key[1]})

    async def stop(self) -> None:
        """Cancel the passes `soon` scheduled or started."""
        self.scheduled.clear()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def pass_once(self) -> int:
        """Reconcile every known object once, but those backing off; returns how many."""
        count = 0
        for key in list(self.bodies):
            body = self.bodies.get(key)
            if body is None or body["metadata"].get("deletionTimestamp") or self.backing_off(key):
                continue
            try:
                await self.reconcile_locked(body)
            except Exception:  # one broken object must not stop the others' resync
                log.exception("resync failed", extra={"namespace": key[0], "service": key[1]})
            count += 1
        return count

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.period_seconds)
            count = await self.pass_once()
            log.debug("resync pass done", extra={"services": count})
