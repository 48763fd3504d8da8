"""Streamed chunks carry their audio twice: float32 (`pcm`) and, converted for the whole
batch on the codec's device, the s16 samples every output format but Opus sends
(`pcm16`). Both must say the same by `api.to_s16le`'s rule, chunk for chunk."""

from __future__ import annotations

import asyncio

import numpy as np

from support.engine_requests import collect, request
from ttsfleet_runtime.engine.api import AudioChunk, to_s16le


def test_the_s16_rule_clips_scales_and_rounds():
    pcm = np.array([-1.5, -1.0, 0.0, 0.4 / 32767, 0.6 / 32767, 0.25, 1.0, 2.0], np.float32)
    samples = np.frombuffer(to_s16le(pcm), "<i2")
    assert samples.tolist() == [-32767, -32767, 0, 0, 1, 8192, 32767, 32767]


def test_a_chunk_without_device_samples_converts_its_own():
    pcm = np.array([0.1, -0.2, 0.3], np.float32)
    chunk = AudioChunk(pcm, 24000, index=0, frames=1, t_admitted=0.0, t_emitted=0.0)
    assert chunk.pcm16 is None and chunk.s16le() == to_s16le(pcm)


async def test_every_streamed_chunk_carries_the_same_audio_as_s16(make_engine):
    engine = await make_engine(max_batch=4)
    # Several streams in one codec batch, with chunk ramps of different lengths.
    streams = [
        engine.submit(request(frames=frames, seed=seed)) for seed, frames in enumerate((5, 11, 17))
    ]
    results = await asyncio.gather(*(collect(stream) for stream in streams))
    for chunks, _ in results:
        assert chunks
        for chunk in chunks:
            assert chunk.pcm16 is not None and chunk.pcm16.dtype == np.int16
            assert len(chunk.pcm16) == len(chunk.pcm)
            assert chunk.s16le() == to_s16le(chunk.pcm)
