"""A request names the one sample format its chunks carry (`sample_format`): float32,
or int16 made on the codec's device for the whole batch by `api.to_s16le`'s rule. Only
that format comes back from the device, and the two say the same audio."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from support.engine_requests import collect, request
from ttsfleet_runtime.engine.api import S16_FULL_SCALE, AudioChunk, InvalidRequest, to_s16le


def test_the_s16_rule_clips_scales_and_rounds():
    pcm = np.array([-1.5, -1.0, 0.0, 0.4 / 32767, 0.6 / 32767, 0.25, 1.0, 2.0], np.float32)
    samples = np.frombuffer(to_s16le(pcm), "<i2")
    assert samples.tolist() == [-32767, -32767, 0, 0, 1, 8192, 32767, 32767]


def test_a_chunk_converts_to_the_other_format():
    f32 = AudioChunk(np.array([0.1, -0.2, 1.5], np.float32), 24000, 0, 1, 0.0, 0.0)
    assert f32.s16le() == to_s16le(f32.pcm)
    s16 = AudioChunk(np.array([3277, -6553, 32767], np.int16), 24000, 0, 1, 0.0, 0.0)
    assert s16.s16le() == s16.pcm.astype("<i2").tobytes()
    assert s16.float32().dtype == np.float32
    np.testing.assert_allclose(s16.float32(), s16.pcm / S16_FULL_SCALE)


def test_an_unknown_sample_format_is_refused():
    with pytest.raises(InvalidRequest) as refused:
        request(sample_format="s24", frames=4, seed=0)
    assert refused.value.param == "sample_format"


async def test_each_stream_gets_the_format_it_asked_for_in_one_codec_batch(make_engine):
    engine = await make_engine(max_batch=8)
    # Pairs of identical requests (same seed, same length), one of each pair asking for
    # int16: all six share the codec's batches, with chunk ramps of different lengths.
    lengths = (5, 11, 17)
    streams = [
        engine.submit(request(frames=frames, seed=seed, sample_format=fmt))
        for seed, frames in enumerate(lengths)
        for fmt in ("f32", "s16")
    ]
    results = await asyncio.gather(*(collect(stream) for stream in streams))
    for pair in range(len(lengths)):
        (f32_chunks, f32_audio), (s16_chunks, s16_audio) = results[2 * pair : 2 * pair + 2]
        assert f32_chunks and all(c.pcm.dtype == np.float32 for c in f32_chunks)
        assert s16_chunks and all(c.pcm.dtype == np.int16 for c in s16_chunks)
        assert [len(c.pcm) for c in s16_chunks] == [len(c.pcm) for c in f32_chunks]
        # The same audio: the device's conversion follows to_s16le's rule (one step of
        # rounding apart at most, the float decode of two rows of one batch may differ
        # in its last bit).
        expected = np.frombuffer(to_s16le(f32_audio), "<i2").astype(np.int32)
        assert np.abs(s16_audio.astype(np.int32) - expected).max() <= 1
        assert np.abs(expected).max() > 100  # not silence
