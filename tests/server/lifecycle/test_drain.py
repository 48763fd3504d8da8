"""SIGTERM: readiness off, new work refused, in-flight streams finish, exit.

The server runs as `ttsfleet serve` in a subprocess, as in a pod, over the tiny
checkpoint on CPU.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from support.runtime import RuntimeProcess


@pytest.fixture
def serve(tiny_custom_voice, tmp_path):
    runtimes = []

    def start(*flags: str):
        # Info level: the test reads the drain's own log line.
        runtime = RuntimeProcess(
            tmp_path, tiny_custom_voice, *flags, name=f"serve-{len(runtimes)}", log_level="info"
        )
        runtimes.append(runtime)
        runtime.wait_ready(90)
        return runtime

    yield start
    for runtime in runtimes:
        runtime.stop()


def speech(base, **fields):
    model = httpx.get(base + "/v1/models").json()["data"][0]["id"]
    return {
        "model": model,
        "input": "Draining",
        "voice": "vivian",
        "response_format": "pcm",
        **fields,
    }


def test_sigterm_lets_the_stream_finish_refuses_new_work_and_exits(serve):
    runtime = serve("--max-audio-seconds", "6.4", "--drain-timeout", "60")
    process, base = runtime.process, runtime.base
    with httpx.stream(
        "POST", base + "/v1/audio/speech", json=speech(base, stream_format="audio"), timeout=60
    ) as stream:
        pieces = stream.iter_bytes()
        received = len(next(pieces))
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        ready = httpx.get(base + "/health/ready")
        assert (ready.status_code, ready.json()) == (503, {"status": "draining"})
        refused = httpx.post(base + "/v1/audio/speech", json=speech(base))
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "draining"
        assert "retry-after" in refused.headers
        received += sum(len(piece) for piece in pieces)
    # 6.4 s at 12.5 frames/s = 80 frames of 1920 samples, s16le: all of it.
    assert received == 80 * 1920 * 2
    assert process.wait(timeout=30) == 0
    log = runtime.log_text()
    assert '"msg": "drained"' in log and '"all_finished": true' in log


def test_a_stream_longer_than_the_drain_deadline_is_cut_and_the_process_exits(serve):
    runtime = serve("--max-audio-seconds", "120", "--drain-timeout", "1")
    process, base = runtime.process, runtime.base
    with httpx.stream(
        "POST", base + "/v1/audio/speech", json=speech(base, stream_format="audio"), timeout=60
    ) as stream:
        pieces = stream.iter_bytes()
        received = len(next(pieces))
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            received += sum(len(piece) for piece in pieces)
        except httpx.HTTPError:
            pass  # the cut may end the chunked body abruptly
    assert received < 1500 * 1920 * 2
    assert process.wait(timeout=30) == 0
    assert time.monotonic() - started < 20
