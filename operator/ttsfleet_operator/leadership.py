"""Leader election over a coordination.k8s.io/v1 Lease: of N operator replicas one acts.

Why a Lease we manage rather than kopf's peering: peering is a pause protocol, not an
election. Operators of equal priority that see each other all pause (none acts), a dead
peer is noticed only when its record's lifetime runs out (60 s by default), and it needs
its own cluster-scoped CRDs. A Lease is what every Kubernetes controller uses (the
controller-manager, the scheduler, controller-runtime operators): a built-in kind, one
object, the timing in our hands, and the safety argument below.

How a process uses it (operator_main): it waits as a follower, serving only /healthz and
/metrics, until `acquire` returns; then it starts kopf, whose start-up pass reconciles every
TTSService, while `hold` renews the Lease beside it. A follower therefore never reconciles,
writes status or steps a canary: it has no handlers running. Starting kopf only once
leader (instead of running it everywhere with every handler gated) costs a second or two
of start-up at failover, but no handler, timer or in-flight pass can ever act on a
follower, and the new leader's start-up pass is the take-over: nothing waits for a timer.

Timing (`LeaseTiming`), as client-go's leader election defines it:
- lease_duration: a follower takes the Lease once its record has not changed for this
  long, measured on the follower's own clock from when it SAW the change (no clock on
  another machine is trusted);
- renew_deadline: a leader that has not renewed within this long of its last successful
  renewal's request stops acting: the process exits (the pod restarts as a follower);
- retry_period: how often a leader renews and a follower looks.
Safety: renew_deadline < lease_duration. The leader measures its deadline from when it
SENT its last renewal that succeeded, so it is gone by then + renew_deadline; no follower
can have seen that renewal before it was sent, so none takes over before then +
lease_duration. Failover after a crash is at most lease_duration + retry_period + kopf's
start-up; on a clean stop (SIGTERM, a rolling update) the leader gives the Lease up and the
follower takes it on its next look.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import aiohttp
from kubernetes_asyncio import client

log = logging.getLogger(__name__)

# What a request to the API server may fail with that a later attempt can get past.
_API_ERRORS = (TimeoutError, client.ApiException, OSError, aiohttp.ClientError)

DEFAULT_LEASE_NAME = "ttsfleet-operator"


@dataclasses.dataclass(frozen=True)
class LeaseTiming:
    """Seconds; defaults chosen for a failover well within 15 s (docs/operator-ha.md)."""

    lease_duration: float = 8.0
    renew_deadline: float = 5.0
    retry_period: float = 1.0

    def __post_init__(self):
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "lease timing needs 0 < retry period < renew deadline < lease duration "
                f"(got {self.retry_period}, {self.renew_deadline}, {self.lease_duration})"
            )


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as the election reads it."""

    holder: str  # "" when nobody holds it (released)
    lease_duration_seconds: int
    transitions: int
    acquire_time: str | None
    renew_time: str | None


def default_identity() -> str:
    """Unique per process: the pod name (the chart sets POD_NAME) or the host name, and a
    random suffix, so a restarted pod never mistakes the old process's Lease for its own."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


class Observation:
    """What a contender last saw of the Lease and when, on its own monotonic clock."""

    def __init__(self):
        self.record: LeaseRecord | None = None
        self.seen_at: float = 0.0

    def update(self, record: LeaseRecord, now: float) -> None:
        if record != self.record:
            self.record = record
            self.seen_at = now

    def held_by_another(self, identity: str, timing: LeaseTiming, now: float) -> bool:
        """Another contender holds the Lease and its record changed within lease_duration."""
        record = self.record
        if record is None or not record.holder or record.holder == identity:
            return False
        duration = max(timing.lease_duration, float(record.lease_duration_seconds or 0))
        return now - self.seen_at < duration


def _micro_time(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: dict) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
    )


class LeaderElection:
    """One contender for the Lease `namespace/name`.

    `acquire()` returns once this process leads; `hold()` renews until the renew deadline
    passes without a renewal, then calls `on_lost` (which must stop the process acting);
    `release()` gives the Lease up on a clean stop. `on_change(leading)` is told of every
    change (metrics, logs).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        timing: LeaseTiming | None = None,
        on_change: Callable[[bool], None] = lambda leading: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.timing = timing or LeaseTiming()
        self.on_change = on_change
        self.clock = clock
        self.observation = Observation()
        self.leading = False
        self._renewed_at = 0.0

    def _fields(self) -> dict:
        return {"lease": f"{self.namespace}/{self.name}", "identity": self.identity}

    async def _call(self, method, *args, timeout: float) -> dict:
        """One request, its JSON body back; any status but 2xx raises ApiException (the
        client raises none itself for unparsed responses)."""
        response = await method(*args, _preload_content=False, _request_timeout=timeout)
        try:
            body = await response.read()
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise client.ApiException(
                status=response.status, reason=body.decode(errors="replace")[:500]
            )
        return json.loads(body)

    async def _read(self, timeout: float) -> dict | None:
        try:
            return await self._call(
                self.api.read_namespaced_lease, self.name, self.namespace, timeout=timeout
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def _write(self, lease: dict, timeout: float) -> dict:
        """Replace the Lease with `lease` (its resourceVersion makes a stale write a 409)."""
        return await self._call(
            self.api.replace_namespaced_lease, self.name, self.namespace, lease, timeout=timeout
        )

    def _spec(self, previous: LeaseRecord | None, now: str) -> dict:
        taking_over = previous is None or previous.holder != self.identity
        transitions = 0 if previous is None else previous.transitions
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.timing.lease_duration)),
            "acquireTime": now if taking_over else previous.acquire_time,
            "renewTime": now,
            "leaseTransitions": transitions + 1 if taking_over and previous else transitions,
        }

    async def try_acquire_or_renew(self, timeout: float) -> bool:
        """One attempt: True when this process holds the Lease afterwards. Optimistic
        concurrency (resourceVersion) makes two contenders' simultaneous takeovers fail
        for one of them."""
        lease = await self._read(timeout)
        now = self.clock()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, _micro_time()),
            }
            try:
                await self._call(
                    self.api.create_namespaced_lease, self.namespace, body, timeout=timeout
                )
            except client.ApiException as exc:
                if exc.status == 409:  # another contender created it first
                    return False
                raise
            return True
        record = _record(lease)
        self.observation.update(record, now)
        if self.observation.held_by_another(self.identity, self.timing, now):
            return False
        lease["spec"] = self._spec(record, _micro_time())
        try:
            await self._write(lease, timeout)
        except client.ApiException as exc:
            if exc.status == 409:  # written by another contender since we read it
                return False
            raise
        return True

    def _set_leading(self, leading: bool, message: str) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        log.info(message, extra={**self._fields(), "leading": leading})
        self.on_change(leading)

    async def acquire(self) -> None:
        """Wait as a follower until this process holds the Lease."""
        log.info("waiting for leadership", extra=self._fields())
        while True:
            sent = self.clock()
            try:
                if await self.try_acquire_or_renew(self.timing.retry_period):
                    self._renewed_at = sent
                    self._set_leading(True, "leadership acquired")
                    return
            except _API_ERRORS as exc:
                log.warning(
                    "lease look-up failed; retrying", extra={**self._fields(), "error": str(exc)}
                )
            await asyncio.sleep(self.timing.retry_period)

    async def hold(self, on_lost: Callable[[], None]) -> None:
        """Renew every retry_period; once renew_deadline passes since the last successful
        renewal's request, or another contender holds the Lease, call `on_lost`."""
        # The deadline counts from when the last write that succeeded was SENT (see the
        # module docstring): the acquiring one, at first.
        last_renewed = self._renewed_at
        while True:
            await asyncio.sleep(self.timing.retry_period)
            sent = self.clock()
            remaining = self.timing.renew_deadline - (sent - last_renewed)
            renewed = False
            if remaining > 0:
                try:
                    renewed = await self.try_acquire_or_renew(
                        min(self.timing.retry_period, remaining)
                    )
                except _API_ERRORS as exc:
                    log.warning("lease renewal failed", extra={**self._fields(), "error": str(exc)})
            if renewed:
                last_renewed = sent
                continue
            taken = self.observation.held_by_another(self.identity, self.timing, self.clock())
            if taken or self.clock() - last_renewed >= self.timing.renew_deadline:
                self._set_leading(False, "leadership lost")
                on_lost()
                return

    async def release(self, timeout: float = 2.0) -> None:
        """Give the Lease up (holder cleared), so a follower takes over on its next look."""
        if not self.leading:
            return
        try:
            lease = await self._read(timeout)
            if lease is not None and _record(lease).holder == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = _micro_time()
                await self._write(lease, timeout)
        except _API_ERRORS as exc:
            log.warning(
                "could not release the lease; the follower waits out its duration",
                extra={**self._fields(), "error": str(exc)},
            )
        self._set_leading(False, "leadership released")
