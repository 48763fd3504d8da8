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
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)

# Superseded versions kept per object: far more than passes ever queue on one lock.
SUPERSEDED_KEPT = 64


class Resync:
    def __init__(
        self,
        reconcile: Callable[[dict], Awaitable[object]],
        period_seconds: float,
        coalesce_seconds: float = 1.0,
    ):
        self.reconcile = reconcile
        self.period_seconds = period_seconds
        self.coalesce_seconds = coalesce_seconds
        self.bodies: dict[Key, dict] = {}
        self.locks: collections.defaultdict[Key, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
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
            outcome = await self.reconcile(body)
            written = getattr(outcome, "written", None)
            if version is not None and isinstance(written, dict) and (written.get("metadata") or {}).get(
                "resourceVersion"
            ):
                older = collections.deque(stale, maxlen=SUPERSEDED_KEPT)
                older.extend(v for v in dict.fromkeys((started, version)) if v not in older)
                self.superseded[key] = (older, copy.deepcopy(written))
            return outcome

    def soon(self, key: Key) -> None:
        """One pass over `key` after `coalesce_seconds`, shared by every request until it starts."""
        if key in self.scheduled or key not in self.bodies:
            return
        task = asyncio.create_task(self._pass_soon(key), name=f"ttsfleet-resync-soon-{key[0]}/{key[1]}")
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
        """Reconcile every known object once; returns how many."""
        count = 0
        for key in list(self.bodies):
            body = self.bodies.get(key)
            if body is None or body["metadata"].get("deletionTimestamp"):
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
