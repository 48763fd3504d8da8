"""Streaming is the default, as in OpenAI's API: a plain
`with_streaming_response.create(...)` gets audio while it is generated.

"While" is judged by the engine's own progress, not by a clock: the first
piece must reach the client when the engine has generated only part of the
utterance's frames.
"""

from __future__ import annotations

import io

import numpy as np
import openai
import pytest
import soundfile

from conftest import API_KEY
from live_server import LiveServer
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.settings import ServerSettings

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920
# 100 codec frames at 12.5 Hz: the first chunk (2 frames) is far from the end.
AUDIO_S = 8.0


@pytest.fixture(scope="module")
def long_server(make_engine):
    with LiveServer(make_engine(), ServerSettings(max_audio_seconds=AUDIO_S), ApiKeys((API_KEY,))) as live:
        yield live


def decode(data: bytes, fmt: str) -> np.ndarray:
    if fmt == "pcm":
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE
    return samples


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus"])
def test_plain_streaming_request_gets_audio_before_generation_ends(long_server, fmt):
    client = openai.OpenAI(base_url=long_server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
    frames = lambda: long_server.engine.stats().frames_total  # noqa: E731
    before = frames()
    with client.audio.speech.with_streaming_response.create(
        model=long_server.runtime.served_models[0], voice="Ryan", input="Streaming by default", response_format=fmt
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in response.headers
        pieces = response.iter_bytes()
        first = next(pieces)
        generated_at_first_piece = frames() - before
        data = first + b"".join(pieces)
    generated = frames() - before

    assert 0 < generated_at_first_piece < generated
    if fmt == "wav":  # a streaming header: sizes unknown when it was sent
        assert data[4:8] == data[40:44] == b"\xff\xff\xff\xff"
    samples = decode(data, fmt)
    # mp3 adds encoder delay and frame padding; the others are sample-exact.
    expected = generated * SAMPLES_PER_FRAME
    assert abs(len(samples) - expected) <= (0.1 * SAMPLE_RATE if fmt == "mp3" else 0)
    assert np.abs(samples).max() > 0.01
