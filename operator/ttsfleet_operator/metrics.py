"""The operator's Prometheus metrics: the one place that names them.

The alert rules and dashboards in charts/ttsfleet/ read these names, so they are
a contract like the runtime's catalogue (ttsfleet_runtime.metrics). What each
metric means, exactly:

- ttsfleet_operator_reconcile_duration_seconds (histogram, label `result`):
  wall time of one reconcile pass of one TTSService (change handler or resync).
  result: ok (nothing failed), error (the pass reported a problem: invalid spec,
  a child's apply or delete refused), exception (the pass raised).
- ttsfleet_operator_reconcile_errors_total (counter, labels namespace, service,
  reason, kind): failed passes. reason: InvalidSpec, ApiKeysSecretFailed,
  ApplyFailed, DeleteFailed, Exception. kind: the child kind whose create, apply or
  delete failed (Secret for ApiKeysSecretFailed), TTSService for the other reasons.
- ttsfleet_operator_managed_objects (gauge, label kind): TTSServices the operator
  knows, and the children it keeps in place for them (what its last pass rendered), by kind.
- ttsfleet_operator_replicas (gauge, labels namespace, service, track, pool):
  replicas the operator asks of each runtime Deployment (the pool split of
  spec.replicas); pool is on-demand or spot, track stable or canary.
- ttsfleet_operator_on_demand_floor (gauge, labels namespace, service): ready
  on-demand pods the service should never go below: spot.minOnDemand capped at
  spec.replicas. The "below the on-demand floor" alert compares the runtime's
  ready on-demand pods with it.
- ttsfleet_operator_canary_state (gauge, labels namespace, service, state): 1 for
  the service's current canary state, 0 for the other states: the phase the last
  pass left the rollout in, as `state_machine.METRIC_STATE` names it. A service
  that never had a canary has no series.

- ttsfleet_operator_leader (gauge): 1 while this process is the one that acts (holds
  the leader-election Lease, or runs without leader election), 0 while it waits as a
  follower. Of a healthy install's replicas exactly one reports 1.
- ttsfleet_operator_leader_transitions_total (counter): times this process became leader
  or stopped being it.

The fleet gauges and the canary state come from each pass's outcome
(reconcile.Outcome: what it rendered, the phase it stepped to); nothing here
renders or validates a TTSService again.

Series of one TTSService go away when it is deleted (`forget`). Scraped with
`honorLabels: true` (the chart's PodMonitor), so `namespace` is the
TTSService's namespace, not the operator pod's.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable

from ttsfleet_operator import labels
from ttsfleet_operator.canary import state_machine

log = logging.getLogger(__name__)

RECONCILE_DURATION = "ttsfleet_operator_reconcile_duration_seconds"
RECONCILE_ERRORS = "ttsfleet_operator_reconcile_errors_total"
MANAGED_OBJECTS = "ttsfleet_operator_managed_objects"
REPLICAS = "ttsfleet_operator_replicas"
ON_DEMAND_FLOOR = "ttsfleet_operator_on_demand_floor"
CANARY_STATE = "ttsfleet_operator_canary_state"
LEADER = "ttsfleet_operator_leader"
LEADER_TRANSITIONS = "ttsfleet_operator_leader_transitions_total"
API_REQUESTS = "ttsfleet_operator_api_requests_total"

ALL = (
    RECONCILE_DURATION,
    RECONCILE_ERRORS,
    MANAGED_OBJECTS,
    REPLICAS,
    ON_DEMAND_FLOOR,
    CANARY_STATE,
    LEADER,
    LEADER_TRANSITIONS,
    API_REQUESTS,
)

# The `state` label's values, from the canary phases (canary/state_machine.py); the alert
# reads `rolled_back`.
CANARY_STATES = tuple(dict.fromkeys(state_machine.METRIC_STATE.values()))
CANARY_ROLLED_BACK = state_machine.METRIC_STATE[state_machine.ROLLED_BACK]

# A pass lists five kinds and applies a few objects: tens of ms to seconds.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

Key = tuple[str, str]  # (namespace, name)
Reconcile = Callable[[dict], Awaitable[object]]


@dataclasses.dataclass(frozen=True)
class FleetShape:
    """What the operator keeps in place for one TTSService, as its last pass rendered it."""

    children: dict[str, int]  # kind -> count
    replicas: dict[tuple[str, str], int]  # (track, pool) -> replicas
    on_demand_floor: int


def fleet_shape(outcome: object) -> FleetShape | None:
    """The fleet a pass rendered (reconcile.Outcome); None when it applied nothing (an invalid
    spec, or no API keys Secret for the pods)."""
    rendered = getattr(outcome, "rendered", None)
    if rendered is None:
        return None
    replicas = {}
    for manifest in rendered:
        if manifest["kind"] == "Deployment":
            pod_labels = manifest["spec"]["selector"]["matchLabels"]
            replicas[(pod_labels[labels.TRACK], pod_labels[labels.POOL])] = manifest["spec"][
                "replicas"
            ]
    return FleetShape(
        children=dict(collections.Counter(m["kind"] for m in rendered)),
        replicas=replicas,
        on_demand_floor=outcome.on_demand_floor,
    )


class OperatorMetrics:
    """The collectors of one operator process, in their own registry.

    `instrument` wraps the reconcile callable (time, errors, fleet gauges);
    `forget` drops a deleted TTSService's series; `serve` starts /metrics.
    Handlers run on kopf's event loop and scrapes on the HTTP server's thread,
    so the per-service state sits behind a lock.
    """

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.duration = Histogram(
            RECONCILE_DURATION,
            "Wall time of one reconcile pass of one TTSService",
            ["result"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            RECONCILE_ERRORS.removesuffix("_total"),
            "Failed reconcile passes by reason and the kind that failed",
            ["namespace", "service", "reason", "kind"],
            registry=self.registry,
        )
        self.leader = Gauge(
            LEADER, "1 while this process is the operator replica that acts", registry=self.registry
        )
        self.leader_transitions = Counter(
            LEADER_TRANSITIONS.removesuffix("_total"),
            "Times this process became leader or stopped being it",
            registry=self.registry,
        )
        # Every request the operator's own API client sends (kube_cluster.py), by verb and
        # resource: what a pass costs the API server, and that an idle pass writes nothing.
        self.api_requests = Counter(
            API_REQUESTS.removesuffix("_total"),
            "Requests the operator's API client sent, by HTTP verb and resource",
            ["verb", "resource"],
            registry=self.registry,
        )
        self._lock = threading.Lock()
        self._shapes: dict[Key, FleetShape | None] = {}
        self._canary: dict[Key, str] = {}
        self._leading: bool | None = None
        self._error_labels: dict[Key, set[tuple[str, str]]] = collections.defaultdict(set)
        self.registry.register(_FleetCollector(self))

    def instrument(self, reconcile: Reconcile) -> Reconcile:
        """`reconcile` with its passes timed, counted and reflected in the gauges."""

        async def instrumented(body: dict):
            started = time.perf_counter()
            try:
                outcome = await reconcile(body)
            except Exception:
                self.duration.labels(result="exception").observe(time.perf_counter() - started)
                self._count_error(body, "Exception", "TTSService")
                raise
            elapsed = time.perf_counter() - started
            problem = getattr(outcome, "problem", None)
            self.duration.labels(result="error" if problem else "ok").observe(elapsed)
            if problem is not None:
                self._count_error(
                    body, problem.reason, getattr(outcome, "failed_kind", None) or "TTSService"
                )
            self.observe(body, outcome)
            return outcome

        return instrumented

    def count_request(self, verb: str, resource: str) -> None:
        self.api_requests.labels(verb=verb, resource=resource).inc()

    def observe(self, body: dict, outcome: object) -> None:
        """The fleet and canary phase a pass of `body` reported in its outcome."""
        shape = fleet_shape(outcome)
        phase = getattr(outcome, "canary_phase", None)
        key = _key(body)
        if phase is not None:
            self.set_canary_state(*key, state_machine.METRIC_STATE[phase])
        with self._lock:
            if shape is None and self._shapes.get(key) is not None:
                # An invalid spec is not applied: the children of the last valid one stay.
                return
            self._shapes[key] = shape

    def set_canary_state(self, namespace: str, service: str, state: str) -> None:
        if state not in CANARY_STATES:
            raise ValueError(f"unknown canary state {state!r}; known: {', '.join(CANARY_STATES)}")
        with self._lock:
            self._canary[(namespace, service)] = state

    def set_leader(self, leading: bool) -> None:
        """Whether this process acts; a change from what the gauge says counts a transition
        (the first setting at start-up is none)."""
        with self._lock:
            if self._leading is not None and self._leading != leading:
                self.leader_transitions.inc()
            self._leading = leading
        self.leader.set(1 if leading else 0)

    def forget(self, namespace: str, service: str) -> None:
        """A TTSService is gone: drop every series that names it."""
        key = (namespace, service)
        with self._lock:
            self._shapes.pop(key, None)
            self._canary.pop(key, None)
            for reason, kind in self._error_labels.pop(key, set()):
                self.errors.remove(namespace, service, reason, kind)

    def _count_error(self, body: dict, reason: str, kind: str) -> None:
        namespace, service = _key(body)
        with self._lock:
            self._error_labels[(namespace, service)].add((reason, kind))
            self.errors.labels(namespace=namespace, service=service, reason=reason, kind=kind).inc()

    def snapshot(self) -> tuple[dict[Key, FleetShape | None], dict[Key, str]]:
        with self._lock:
            return dict(self._shapes), dict(self._canary)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def serve(self, port: int, address: str = "0.0.0.0"):
        """Serve /metrics on its own port from a daemon thread; returns the server."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        log.info("metrics served", extra={"port": server.server_port})
        return server


def _key(body: dict) -> Key:
    return body["metadata"].get("namespace", "default"), body["metadata"]["name"]


class _FleetCollector:
    """Gauges computed at scrape time from the last pass of each TTSService."""

    def __init__(self, metrics: OperatorMetrics):
        self._metrics = metrics

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        shapes, canary = self._metrics.snapshot()
        managed = GaugeMetricFamily(
            MANAGED_OBJECTS, "TTSServices and the children kept for them", labels=["kind"]
        )
        replicas = GaugeMetricFamily(
            REPLICAS,
            "Replicas asked of each runtime Deployment",
            labels=["namespace", "service", "track", "pool"],
        )
        floor = GaugeMetricFamily(
            ON_DEMAND_FLOOR,
            "Ready on-demand pods a service should keep",
            labels=["namespace", "service"],
        )
        states = GaugeMetricFamily(
            CANARY_STATE,
            "1 for the current canary state of a service",
            labels=["namespace", "service", "state"],
        )
        kinds: collections.Counter[str] = collections.Counter({"TTSService": len(shapes)})
        for (namespace, service), shape in sorted(shapes.items()):
            if shape is None:
                continue
            kinds.update(shape.children)
            for (track, pool), count in sorted(shape.replicas.items()):
                replicas.add_metric([namespace, service, track, pool], count)
            floor.add_metric([namespace, service], shape.on_demand_floor)
        for kind, count in sorted(kinds.items()):
            managed.add_metric([kind], count)
        for (namespace, service), current in sorted(canary.items()):
            for state in CANARY_STATES:
                states.add_metric([namespace, service, state], 1 if state == current else 0)
        yield from (managed, replicas, floor, states)
