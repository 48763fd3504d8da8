"""Shared pieces of the hostile-input suites (tests/server/schema).

`json_values`: JSON of every type and shape, for fields and messages.
`Bystander`: a well-behaved client streaming speech in a loop beside the
fuzzer; one client must never hurt another, so its every stream must finish
whole.
"""

from __future__ import annotations

import math
import threading

import httpx
from hypothesis import strategies as st

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


FRAMES_PER_S = 12.5  # the tiny checkpoints' 12 Hz tokenizer
BYTES_PER_FRAME = 1920 * 2  # 16-bit pcm samples at 24 kHz


class Bystander:
    """Streams pcm speech back to back on its own thread until stopped.

    Every stream must run to the server's `max_audio_seconds` (`audio_s`), as
    the server rounds it up to whole frames: random checkpoints never say EOS
    (random_checkpoint.py), so a shorter or longer stream is a real fault."""

    def __init__(self, server, key: str, audio_s: float):
        self.server = server
        self.key = key
        self.expected_frames = math.ceil(audio_s * FRAMES_PER_S)
        self.finished = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = {
            "model": self.server.runtime.served_models[0],
            "voice": "Vivian",
            "input": "I am just passing by.",
            "response_format": "pcm",
        }
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.server.base_url, headers=headers, timeout=60) as client:
            while not self._stop.is_set():
                try:
                    with client.stream("POST", "/v1/audio/speech", json=body) as response:
                        data = b"".join(response.iter_bytes())
                    frames = len(data) / BYTES_PER_FRAME
                    if response.status_code != 200 or frames != self.expected_frames:
                        self.failures.append(
                            f"status {response.status_code}, {frames:g} frames "
                            f"({len(data)} bytes), expected {self.expected_frames}"
                        )
                    else:
                        self.finished += 1
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))

    def __enter__(self) -> Bystander:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
