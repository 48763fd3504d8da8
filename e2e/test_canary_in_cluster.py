"""The whole canary loop on the real control plane: the operator PROCESS (as the chart's
ServiceAccount) analyses a REAL Prometheus that scrapes REAL runtime processes (`ttsfleet
serve`, tiny random CPU checkpoint), and the HTTPRoute's weights follow the steps to
promotion.

kwok has no kubelets, so the TTSService's pods run nothing: two local runtimes stand in for
its stable and canary pods, scraped with exactly the target labels the chart's runtime
PodMonitor gives those pods (`namespace`, `service`, `track`, `pool`, `pod`; see
docs/metrics.md). Traffic goes straight to them (no mesh here applies the route's weights);
what is proved is the control loop: Prometheus numbers -> analysis -> state machine ->
HTTPRoute weights, status, Events, and the canary Deployments removed once promoted.
"""

from __future__ import annotations

import time

import pytest

from support.operator_fixtures import children, load_sample, owned_by, tts
from support.prometheus import Prometheus
from support.runtime import RuntimeProcess, write_tiny_checkpoint
from support.traffic import SpeechTraffic, request_seconds
from ttsfleet_operator import labels
from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.render.names import track_service_name
from ttsfleet_operator.tts_service import CanarySpec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INTERVAL = 10  # the schema's shortest analysis interval
STEPS = 2


@pytest.fixture
def runtimes(tmp_path):
    """Two runtimes: the stable pod and the canary pod of the TTSService under test."""
    checkpoint = write_tiny_checkpoint(tmp_path / "tiny")
    procs = {
        track: RuntimeProcess(
            tmp_path, checkpoint, "--max-audio-seconds", "0.4", "--max-batch", "4", name=track
        )
        for track in (labels.STABLE, labels.CANARY)
    }
    try:
        for runtime in procs.values():
            runtime.wait_ready(240)
        yield procs
    finally:
        for runtime in procs.values():
            runtime.stop()


@pytest.fixture
def prometheus(tmp_path, runtimes, namespace):
    """A real Prometheus scraping both runtimes as the chart's PodMonitor would scrape the pods."""
    name = load_sample("canary.yaml")["metadata"]["name"]

    def job(track: str) -> dict:
        target_labels = {
            "namespace": namespace,
            "service": name,
            "track": track,
            "pool": "on-demand",
            "pod": f"{name}-{track}-0",
        }
        return {
            "job_name": f"runtime-{track}",
            "static_configs": [
                {"targets": [f"127.0.0.1:{runtimes[track].port}"], "labels": target_labels}
            ],
        }

    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [job(labels.STABLE), job(labels.CANARY)],
    }
    (tmp_path / "prometheus").mkdir()
    server = Prometheus(tmp_path / "prometheus", config)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def route_weights(cluster, name: str, namespace: str) -> tuple[int, int] | None:
    """(stable, canary) backend weights of the service's HTTPRoute, None before it exists."""
    routes = children(cluster, "httproutes", name, namespace)
    if not routes:
        return None
    (rule,) = routes[0]["spec"]["rules"]
    weights = {ref["name"]: ref["weight"] for ref in rule["backendRefs"]}
    return weights[track_service_name(name, labels.STABLE)], weights[
        track_service_name(name, labels.CANARY)
    ]


def canary_events(cluster, name: str, namespace: str) -> list[str]:
    """Reasons of the Canary* Events on the TTSService, oldest first."""
    items = cluster.get(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    items.sort(
        key=lambda e: (e.get("firstTimestamp") or "", e["metadata"].get("creationTimestamp") or "")
    )
    return [e["reason"] for e in items if e["reason"].startswith("Canary")]


def canary_deployments(cluster, name: str, namespace: str) -> list[str]:
    return [
        d["metadata"]["name"]
        for d in children(cluster, "deployments", name, namespace)
        if d["metadata"].get("labels", {}).get(labels.TRACK) == labels.CANARY
    ]


def test_healthy_canary_walks_the_route_weights_to_promotion(
    cluster, gateway_api, operator_install, operator, namespace, runtimes, prometheus
):
    # The operator caches discovery; a fresh process also sees HTTPRoute at once.
    operator.restart(extra_args=("--prometheus-url", prometheus.url))
    try:
        _walk_to_promotion(cluster, namespace, runtimes, prometheus)
    finally:
        # Later tests get the session's operator as they expect it: no Prometheus.
        operator.restart()


def _walk_to_promotion(cluster, namespace, runtimes, prometheus):
    manifest = load_sample("canary.yaml")
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    # A lone caller's first audio comes before its request ends; ten request times leave a
    # busy 2-core machine plenty of room (the slow path is test_canary_prometheus's).
    threshold_ms = max(200, round(10_000 * request_seconds(runtimes[labels.CANARY].base)))
    spec["canary"].update(percent=20, traffic="Auto")
    spec["canary"]["analysis"] = {
        "intervalSeconds": INTERVAL,
        "steps": STEPS,
        "minRequests": 3,
        "maxErrorRatio": 0.5,
        "ttfaP95Milliseconds": threshold_ms,
        "failureLimit": 1,
        "inconclusiveLimit": 3,
    }
    canary = CanarySpec.model_validate(spec["canary"])
    step_weights = [sm.step_weight(canary, step) for step in range(1, STEPS + 1)]
    assert step_weights == [20, 60]

    loads = [
        SpeechTraffic(runtimes[t].base, callers=1, pause=0.2).start()
        for t in (labels.STABLE, labels.CANARY)
    ]
    seen: list[tuple[int, int]] = []  # the route's distinct (stable, canary) weights, in order
    phases: list[str] = []
    try:
        # Traffic first, so the first interval already has canary requests in Prometheus.
        time.sleep(3)
        started = time.monotonic()
        cluster.apply(manifest, "-n", namespace)

        def promoted():
            # The status first: a pass applies the route before it writes the status, so a
            # route read after a Promoted status shows that pass's weights. (Read the other
            # way round, the pass could land between the two reads: Promoted, with the
            # route's last weights never seen.)
            status = (tts(cluster, name, namespace).get("status") or {}).get("canary") or {}
            weights = route_weights(cluster, name, namespace)
            if weights is not None and (not seen or seen[-1] != weights):
                seen.append(weights)
            phase = status.get("phase")
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)
            assert phase not in (sm.ROLLED_BACK, sm.PAUSED), status
            return phase == sm.PROMOTED and status

        status = cluster.wait_for(
            promoted,
            timeout=STEPS * INTERVAL + 60,
            interval=0.3,
            what="the canary to reach Promoted",
        )
        print(
            f"promoted in {time.monotonic() - started:.0f} s; TTFA threshold {threshold_ms} ms;"
            f" weights {seen}; phases {phases}; last analysis {status.get('lastAnalysis')}"
        )
    finally:
        for load in loads:
            load.stop()
    assert all(load.failures == [] for load in loads), [load.failures for load in loads]

    # The route walked the steps' weights in order, then all traffic went to stable (which now
    # runs the candidate).
    canary_weights = [c for _, c in seen]
    assert all(s + c == 100 for s, c in seen), seen
    assert [w for w in canary_weights if w in step_weights] == step_weights, seen
    assert canary_weights[0] == step_weights[0] and canary_weights[-1] == 0, seen
    assert phases[0] == sm.PROGRESSING and phases[-1] == sm.PROMOTED, phases
    assert status["revision"] and status["step"] == STEPS and status["weight"] == 0, status
    assert status["lastAnalysis"]["result"] == sm.PASS, status
    assert "requests" in status["lastAnalysis"]["reason"], status

    obj = tts(cluster, name, namespace)
    assert obj["status"]["canaryWeight"] in (0, None), obj["status"]
    (route,) = children(cluster, "httproutes", name, namespace)
    assert owned_by(route, obj)

    # Events on the way: started, one step advanced per passing step, promoting, promoted.
    expected = [
        "CanaryStarted",
        *["CanaryStepAdvanced"] * (STEPS - 1),
        "CanaryPromoting",
        "CanaryPromoted",
    ]
    reasons = cluster.wait_for(
        lambda: len(r := canary_events(cluster, name, namespace)) >= len(expected) and r,
        timeout=10,
        what="the canary Events",
    )
    assert reasons == expected, reasons

    # Promoted: the canary Deployments are gone; the stable ones serve the candidate, ready.
    cluster.wait_for(
        lambda: not canary_deployments(cluster, name, namespace),
        timeout=30,
        what="the canary Deployments to be removed",
    )
    stable = [
        d
        for d in children(cluster, "deployments", name, namespace)
        if d["metadata"]["labels"].get(labels.TRACK) == labels.STABLE
    ]
    assert stable
    for deployment in stable:
        assert deployment["metadata"]["annotations"][labels.REVISION] == status["revision"], (
            deployment["metadata"]
        )
        assert (deployment["status"].get("readyReplicas") or 0) == deployment["spec"]["replicas"], (
            deployment["status"]
        )
