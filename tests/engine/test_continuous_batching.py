"""Requests join and leave a running batch at any step without changing what
each one generates: a seeded request gives the same codes and audio alone or
next to others."""

from __future__ import annotations

import asyncio

import numpy as np

from support.engine_requests import codes_of, collect, request


async def test_joining_and_leaving_gives_the_same_codes_as_solo_runs(make_engine):
    engine = await make_engine(max_batch=4)
    long_req = lambda: request(frames=14, seed=11)  # noqa: E731
    short_req = lambda: request(text="Short one.", voice="vivian", frames=5, seed=22)  # noqa: E731

    solo_long = engine.submit(long_req())
    _, solo_long_pcm = await collect(solo_long)
    solo_short = engine.submit(short_req())
    _, solo_short_pcm = await collect(solo_short)

    # The short request joins after the long one has produced audio, and
    # leaves while it is still running.
    long_stream = engine.submit(long_req())
    chunks = long_stream.__aiter__()
    first = await chunks.__anext__()
    short_stream = engine.submit(short_req())
    rest_long, (_, short_pcm) = await asyncio.gather(_drain(chunks), collect(short_stream))
    long_pcm = np.concatenate([first.pcm] + [c.pcm for c in rest_long])

    np.testing.assert_array_equal(codes_of(long_stream), codes_of(solo_long))
    np.testing.assert_array_equal(codes_of(short_stream), codes_of(solo_short))
    np.testing.assert_allclose(long_pcm, solo_long_pcm, atol=1e-5)
    np.testing.assert_allclose(short_pcm, solo_short_pcm, atol=1e-5)
    assert long_stream.finish_reason == short_stream.finish_reason == "length"


async def test_different_seeds_give_different_codes_and_same_seed_repeats(make_engine):
    engine = await make_engine(max_batch=4)
    a, b, c = (engine.submit(request(frames=4, seed=s)) for s in (1, 2, 1))
    await asyncio.gather(collect(a), collect(b), collect(c))
    assert np.array_equal(codes_of(a), codes_of(c))
    assert not np.array_equal(codes_of(a), codes_of(b))


async def test_more_requests_than_slots_all_finish_with_full_length(make_engine):
    engine = await make_engine(max_batch=2, max_queue=8)
    streams = [engine.submit(request(frames=3, seed=i)) for i in range(5)]
    results = await asyncio.gather(*(collect(s) for s in streams))
    for stream, (chunks, pcm) in zip(streams, results, strict=True):
        assert stream.finish_reason == "length"
        assert sum(c.frames for c in chunks) == 3
        assert len(pcm) == 3 * 1920
    assert engine.stats().frames_total == 15


async def _drain(it):
    return [c async for c in it]
