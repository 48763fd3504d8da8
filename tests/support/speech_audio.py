"""Decoding the server's audio responses in the tests (every response format)."""

from __future__ import annotations

import io

import numpy as np
import soundfile

SAMPLE_RATE = 24000


def decode(data: bytes, fmt: str) -> np.ndarray:
    """A response body of `fmt` -> float32 mono samples (files must be at 24 kHz)."""
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE
    return samples
