"""SIGTERM: readiness off, new work refused, in-flight streams finish, exit.

The server runs as `python -m ttsfleet_runtime.cli serve` in a subprocess, as
in a pod, over the tiny checkpoint on CPU.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def serve(tiny_checkpoint):
    processes = []

    def start(*flags: str):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "ttsfleet_runtime.cli", "serve", "--model", str(tiny_checkpoint),
             "--device", "cpu", "--host", "127.0.0.1", "--port", str(port), "--auth", "disabled", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        processes.append(process)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, process.stdout.read()
            try:
                if httpx.get(base + "/health/ready").status_code == 200:
                    return process, base
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def speech(base, **fields):
    model = httpx.get(base + "/v1/models").json()["data"][0]["id"]
    return {"model": model, "input": "Draining", "voice": "vivian", "response_format": "pcm", **fields}


def test_sigterm_lets_the_stream_finish_refuses_new_work_and_exits(serve):
    process, base = serve("--max-audio-seconds", "6.4", "--drain-timeout", "60")
    with httpx.stream("POST", base + "/v1/audio/speech", json=speech(base, stream_format="audio"), timeout=60) as stream:
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
    log = process.stdout.read()
    assert '"msg": "drained"' in log and '"all_finished": true' in log


def test_a_stream_longer_than_the_drain_deadline_is_cut_and_the_process_exits(serve):
    process, base = serve("--max-audio-seconds", "120", "--drain-timeout", "1")
    with httpx.stream("POST", base + "/v1/audio/speech", json=speech(base, stream_format="audio"), timeout=60) as stream:
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
