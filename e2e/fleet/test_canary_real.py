"""A canary with real pods: a bad candidate rolls back on the metrics its own pods produce.

A `gpu.class: cpu` TTSService on the real node with two replicas and a candidate at 50%: one
stable pod runs the runtime image, one canary pod a candidate image whose every stream's
first audio comes late (the runtime image plus one layer: a `sitecustomize` that delays the
engine stream's first chunk, as a bad build would). Streaming clients go through the
Service; kube-proxy splits them over both pods. Prometheus scrapes the pods as the chart's
PodMonitor labels them, and the session's operator process, run with `--prometheus-url`,
analyses the canary track each interval: its TTFA p95 is over the threshold, the interval
fails, and with no failure tolerated the rollout rolls back: weight 0, the canary
Deployment at 0 pods, Degraded, a Warning Event; stable serves everything.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from support.derived_image import derive_image
from support.polling import wait_for
from support.real_fleet import CLUSTER_SH, cache_dir
from support.real_monitoring import MonitoredFleet, image_archive
from ttsfleet_operator import labels

# Pods start, scale and drain as the real kubelet times them: minutes, not the suite's 300 s.
pytestmark = pytest.mark.timeout(900)
# The bad build: the engine stream's first chunk waits this long. Over the analysis's TTFA
# threshold by more than one histogram bucket (the runtime's buckets: ... 2, 5, 10 s).
FIRST_AUDIO_DELAY_S = 6.0
TTFA_THRESHOLD_MS = 4000
LATE_FIRST_AUDIO = f'''"""A bad build for the canary e2e: every stream's first audio comes late."""

import asyncio

from ttsfleet_runtime.engine import stream

_iterate = stream.EngineStream._iterate


async def _late(self):
    await asyncio.sleep({FIRST_AUDIO_DELAY_S})
    async for chunk in _iterate(self):
        yield chunk


stream.EngineStream._iterate = _late
'''.encode()
FAULT_DIR = "/opt/ttsfleet-late-first-audio"
CALLERS = 4
READY_TIMEOUT = 420
ROLLBACK_TIMEOUT = 300


def _run(*cmd: str, timeout: float = 3600) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip()


def late_first_audio_image() -> str:
    """The runtime image plus the bad layer, imported into the real node's containerd (after
    the runtime image itself, whose layers it shares)."""
    base = image_archive("runtime")
    _run(str(CLUSTER_SH), "load-image", str(base), timeout=1800)
    reference, archive = derive_image(
        base_archive=base,
        repository="localhost/ttsfleet/runtime-late-first-audio",
        files={f"{FAULT_DIR}/sitecustomize.py": LATE_FIRST_AUDIO},
        env={"PYTHONPATH": FAULT_DIR},
        out_dir=cache_dir() / "e2e" / "images",
    )
    _run(str(CLUSTER_SH), "load-image", str(archive), timeout=600)
    return reference


@pytest.fixture(scope="module")
def candidate(cluster) -> str:
    return late_first_audio_image()


@pytest.fixture(scope="module")
def fleet(cluster, operator, candidate, tmp_path_factory):
    fleet = MonitoredFleet(
        cluster, operator, tmp_path_factory.mktemp("canary-real"), "e2e-scale-canary"
    )
    try:
        fleet.start(
            {
                "replicas": 2,
                "engine": {"maxBatch": 4, "maxAudioSeconds": 0.8},
                "runtime": {"resources": {"cpu": "500m", "memory": "3Gi", "cacheSize": "1Gi"}},
                "canary": {
                    "percent": 50,
                    "candidate": {"image": candidate},
                    "traffic": "Replicas",
                    "analysis": {
                        # The schema's shortest interval.
                        "intervalSeconds": 10,
                        "steps": 2,
                        "ttfaP95Milliseconds": TTFA_THRESHOLD_MS,
                        "maxErrorRatio": 0.5,
                        "minRequests": 2,
                        # The first failed interval rolls back.
                        "failureLimit": 0,
                        # Quiet intervals while the pods start do not pause the rollout.
                        "inconclusiveLimit": 100,
                    },
                },
            },
            analysis=True,
        )
        wait_for(
            lambda: (
                len(fleet.ready_pods(labels.STABLE)) == 1
                and len(fleet.ready_pods(labels.CANARY)) == 1
            ),
            READY_TIMEOUT,
            2,
            "one stable and one canary pod Ready",
        )
    except BaseException:
        print(fleet.describe())
        fleet.stop()
        raise
    yield fleet
    fleet.stop()


def test_a_candidate_with_late_first_audio_rolls_back_on_its_pods_metrics(fleet, candidate):
    (canary_pod,) = fleet.ready_pods(labels.CANARY)
    (canary_pod_object,) = [
        p for p in fleet.pods(labels.CANARY) if p["metadata"]["name"] == canary_pod
    ]
    assert canary_pod_object["spec"]["containers"][0]["image"] == candidate
    load = fleet.load(CALLERS).start()
    try:
        canary = wait_for(
            lambda: (
                (fleet.tts()["status"].get("canary") or {}).get("phase") == "RolledBack"
                and fleet.tts()["status"]["canary"]
            ),
            ROLLBACK_TIMEOUT,
            2,
            "the canary to roll back",
        )
        wait_for(
            lambda: not fleet.ready_pods(labels.CANARY) and not fleet.pods(labels.CANARY),
            120,
            2,
            "the canary pod gone",
        )
        time.sleep(3)
    except BaseException:
        print(fleet.describe())
        print(fleet.tts().get("status"))
        raise
    finally:
        load.stop()
    print(f"canary: {canary}; load: {load.summary()}")
    # It failed on the numbers its real pod produced, not for want of them.
    assert canary["lastAnalysis"]["result"] == "Fail", canary
    assert "TTFA p95" in canary["lastAnalysis"]["reason"], canary
    assert canary["weight"] == 0
    status = fleet.tts()["status"]
    assert status.get("canaryWeight", 0) == 0
    degraded = {c["type"]: c for c in status["conditions"]}["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryRolledBack")
    canary_deployments = {
        name: d["spec"]["replicas"]
        for name, d in fleet.deployments().items()
        if d["metadata"]["labels"].get(labels.TRACK) == labels.CANARY
    }
    assert canary_deployments and set(canary_deployments.values()) == {0}, canary_deployments
    events = fleet.cluster.get(
        "events", "-n", fleet.namespace, "--field-selector", "reason=CanaryRolledBack"
    )["items"]
    assert events and {e["type"] for e in events} == {"Warning"}, events
    # Stable serves everything: a request through the Service now gets its first audio soon.
    url, key, model = fleet.endpoint()
    started = time.monotonic()
    with httpx.stream(
        "POST",
        f"{url}/v1/audio/speech",
        json={"model": model, "voice": "vivian", "input": "Still here.", "response_format": "pcm"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        next(response.iter_bytes())
        first_audio_s = time.monotonic() - started
    assert first_audio_s < FIRST_AUDIO_DELAY_S, f"first audio after {first_audio_s:.1f} s"
