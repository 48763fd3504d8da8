"""Speech requests sent to a runtime from background threads until stopped, so that
counters move across Prometheus scrapes."""

from __future__ import annotations

import threading
import time
from typing import Self

import httpx


class SpeechTraffic:
    """`callers` threads, each sending speech requests back to back (`pause` s apart).

    varied: every other request streamed (the rest whole-file), and every third followed
    by one the client gets wrong (empty input), which must come back 4xx.
    Any other outcome is recorded in `failures`; `sent` counts ok and invalid requests.
    """

    def __init__(self, base: str, callers: int = 1, pause: float = 0.2, varied: bool = False):
        self.base, self.pause, self.varied = base, pause, varied
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.sent = {"ok": 0, "invalid": 0}
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(callers)]

    def _count(self, key: str) -> None:
        with self._lock:
            self.sent[key] += 1

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=120) as client:
            model = client.get("/v1/models").json()["data"][0]["id"]
            i = 0
            while not self._stopping.is_set():
                body = {
                    "model": model,
                    "voice": "Vivian",
                    "input": f"Sentence number {i}.",
                    "response_format": "pcm",
                }
                if self.varied and i % 2:
                    body["stream_format"] = "audio"
                response = client.post("/v1/audio/speech", json=body)
                if response.status_code == 200 and response.content:
                    self._count("ok")
                else:
                    self.failures.append(f"{response.status_code} {response.text[:200]}")
                if self.varied and i % 3 == 0:
                    # The client's fault (empty input): counted as invalid_request, never as a server error.
                    bad = client.post("/v1/audio/speech", json={**body, "input": ""})
                    if 400 <= bad.status_code < 500:
                        self._count("invalid")
                    else:
                        self.failures.append(
                            f"empty input: {bad.status_code} {bad.text[:200]}, not 4xx"
                        )
                i += 1
                time.sleep(self.pause)

    def start(self) -> Self:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def request_seconds(base: str, samples: int = 3) -> float:
    """Wall time of one whole speech request on this machine now: TTFA thresholds in
    tests scale with it, since a busy 2-core machine can be several times slower."""
    with httpx.Client(base_url=base, timeout=120) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        body = {
            "model": model,
            "voice": "Vivian",
            "input": "Calibration.",
            "response_format": "pcm",
        }
        started = time.monotonic()
        for _ in range(samples):
            assert client.post("/v1/audio/speech", json=body).status_code == 200
        return (time.monotonic() - started) / samples
