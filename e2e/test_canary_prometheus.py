"""Canary analysis end to end: a real Prometheus scrapes real runtime processes (`ttsfleet
serve`, tiny random CPU checkpoint) labelled as the chart's PodMonitor labels pods, and the
operator's own analysis and state machine decide, interval by interval:

- a healthy candidate under traffic passes every step and promotes;
- a slow candidate (one batch slot, many concurrent callers: queueing makes its first audio
  late — the "injected latency") fails and rolls back;
- an idle candidate (no requests) is inconclusive and pauses, never promotes.

No control plane: the reconciler's cluster side is covered by tests/operator (fake API) and
the kwok suite; this test is about the numbers Prometheus gives the state machine.
"""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

from support.prometheus import Prometheus
from support.runtime import RuntimeProcess, write_tiny_checkpoint
from support.traffic import SpeechTraffic, request_seconds
from ttsfleet_operator.canary import analysis
from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.canary.prometheus import Prometheus as PrometheusClient
from ttsfleet_operator.tts_service import CanarySpec

NAMESPACE = "voice"
INTERVAL = 10  # the schema's shortest analysis interval


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Three runtimes, each scraped as the canary of its own service: `fast` (4 batch slots,
    the healthy candidate), `slow` (1 slot, the candidate made slow by queueing) and `idle`
    (no traffic at all)."""
    workdir = tmp_path_factory.mktemp("canary-e2e")
    checkpoint = write_tiny_checkpoint(workdir / "tiny")
    slots = {"fast": 4, "slow": 1, "idle": 1}
    runtimes = {
        name: RuntimeProcess(
            workdir, checkpoint, "--max-audio-seconds", "0.4", "--max-batch", str(count), name=name
        )
        for name, count in slots.items()
    }
    prometheus = None
    try:
        for runtime in runtimes.values():
            runtime.wait_ready(240)

        def job(name: str, service: str, runtime: RuntimeProcess) -> dict:
            labels = {
                "namespace": NAMESPACE,
                "service": service,
                "track": "canary",
                "pool": "on-demand",
                "pod": f"{service}-canary-0",
            }
            return {
                "job_name": name,
                "static_configs": [{"targets": [f"127.0.0.1:{runtime.port}"], "labels": labels}],
            }

        config = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "scrape_timeout": "1s",
            },
            "scrape_configs": [
                job("healthy", "healthy", runtimes["fast"]),
                job("slow", "slow", runtimes["slow"]),
                job("idle", "idle", runtimes["idle"]),
            ],
        }
        (workdir / "prometheus").mkdir()
        prometheus = Prometheus(workdir / "prometheus", config)
        prometheus.wait_ready()
        yield runtimes, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        for runtime in runtimes.values():
            runtime.stop()


def canary_spec(ttfa_ms: int, **analysis_rules) -> CanarySpec:
    rules = {
        "intervalSeconds": INTERVAL,
        "steps": 2,
        "minRequests": 5,
        "maxErrorRatio": 0.01,
        "ttfaP95Milliseconds": ttfa_ms,
        "failureLimit": 0,
        "inconclusiveLimit": 2,
        **analysis_rules,
    }
    return CanarySpec.model_validate(
        {"percent": 20, "candidate": {"image": "runtime:2"}, "analysis": rules}
    )


async def drive(
    client: PrometheusClient, service: str, spec: CanarySpec, until: set[str], timeout: float
):
    """Run the operator's loop for one service: analyse when due, step the state machine."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    status = sm.next_state(spec, "rev-2", None, now).status
    history = [status]
    deadline = time.monotonic() + timeout
    while status.phase not in until:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{service}: no {until} within {timeout} s; history: "
                + "; ".join(f"{s.phase} {s.last_analysis}" for s in history)
            )
        await asyncio.sleep(1)
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        result = None
        if sm.analysis_due(spec, status, now):
            result = await analysis.analyse(client, NAMESPACE, service, spec.analysis)
        status = sm.next_state(
            spec, "rev-2", status, now, analysis=result, stable_serves_candidate=True
        ).status
        if status != history[-1]:
            history.append(status)
    return history


@pytest.mark.slow
def test_healthy_promotes_slow_rolls_back_idle_pauses(fleet):
    runtimes, prometheus = fleet
    client = PrometheusClient(prometheus.url)
    # A lone caller's first audio comes before its request ends (< 1 request time); with one
    # batch slot and twelve callers each first audio waits for ~11 other requests. The
    # threshold sits at 4 request times, measured now, so a busy machine moves both sides.
    threshold_ms = max(10, round(4000 * request_seconds(runtimes["fast"].base, samples=5)))
    healthy_load = SpeechTraffic(runtimes["fast"].base, callers=1, pause=0.2)
    slow_load = SpeechTraffic(runtimes["slow"].base, callers=12, pause=0.0)
    spec = canary_spec(threshold_ms)
    healthy_load.start()
    slow_load.start()
    try:

        async def scenarios():
            return await asyncio.gather(
                drive(client, "healthy", spec, {sm.PROMOTED, sm.ROLLED_BACK}, timeout=120),
                drive(client, "slow", spec, {sm.PROMOTED, sm.ROLLED_BACK}, timeout=120),
                drive(client, "idle", spec, {sm.PAUSED, sm.PROMOTED, sm.ROLLED_BACK}, timeout=120),
            )

        healthy, slow, idle = asyncio.run(scenarios())
    finally:
        healthy_load.stop()
        slow_load.stop()

    assert healthy_load.failures == [] and slow_load.failures == []
    print(
        f"TTFA threshold {threshold_ms} ms; healthy {healthy[-2].last_analysis.reason}; slow {slow[-1].message}"
    )
    assert [s.phase for s in healthy][-1] == sm.PROMOTED, healthy
    assert [s.weight for s in healthy][:2] == [20, 60], "weights follow the steps"
    assert healthy[-2].last_analysis.result == sm.PASS

    assert slow[-1].phase == sm.ROLLED_BACK, slow
    assert "TTFA p95" in slow[-1].last_analysis.reason and slow[-1].weight == 0

    assert idle[-1].phase == sm.PAUSED, idle
    assert all(s.last_analysis is None or s.last_analysis.result == sm.INCONCLUSIVE for s in idle)
    assert "0 requests on the canary" in idle[-1].last_analysis.reason
