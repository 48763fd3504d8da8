"""Cancelling a stream frees its slot at once and ends the iteration."""

from __future__ import annotations

import asyncio

from support.engine_requests import collect, fixed_length, request
from ttsfleet_runtime.engine.api import SynthesisRequest


async def test_cancel_frees_the_slot_immediately(make_engine):
    engine = await make_engine(max_batch=1, max_queue=4)
    stream = engine.submit(request(frames=200, seed=1))
    chunks = stream.__aiter__()
    await chunks.__anext__()
    assert engine.stats().active == 1
    stream.cancel()
    assert engine.stats().active == 0  # no step needed
    rest = [c async for c in chunks]
    assert stream.finish_reason == "cancelled"
    assert len(rest) <= 1  # at most a chunk already in flight


async def test_the_freed_slot_serves_the_next_request(make_engine):
    engine = await make_engine(max_batch=1, max_queue=4)
    first = engine.submit(request(frames=200, seed=1))
    await first.__aiter__().__anext__()
    second = engine.submit(request(frames=2, seed=2))
    first.cancel()
    _, pcm = await collect(second)
    assert second.finish_reason == "length" and len(pcm) == 2 * 1920


async def test_cancel_while_waiting_removes_it_from_the_queue(make_engine):
    engine = await make_engine(max_batch=1, max_queue=4)
    running = engine.submit(request(frames=100, seed=1))
    await running.__aiter__().__anext__()
    waiting = engine.submit(request(frames=2, seed=2))
    assert engine.stats().queue_depth == 1
    waiting.cancel()
    assert engine.stats().queue_depth == 0
    assert [c async for c in waiting] == []
    assert waiting.finish_reason == "cancelled"
    running.cancel()


async def test_cancelled_streams_give_back_their_codec_state(make_engine):
    import asyncio

    engine = await make_engine(max_batch=2, max_queue=4)
    streams = [engine.submit(request(frames=200, seed=i)) for i in range(2)]
    for s in streams:
        await s.__aiter__().__anext__()
    for s in streams:
        s.cancel()
    for _ in range(200):  # the codec worker closes slots after in-flight chunks
        if engine.codec.active == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.codec.active == 0


async def test_cancelling_a_streamed_text_request_stops_its_text_pump(make_engine):
    engine = await make_engine(max_batch=1, max_queue=4)
    quiet = asyncio.Event()  # never set: the text source goes quiet mid-utterance

    async def deltas():
        yield "Hello there, how are you "
        await quiet.wait()
        yield "today?"

    stream = engine.submit(
        SynthesisRequest(text=deltas(), voice="ryan", params=fixed_length(frames=200, seed=1))
    )
    (pump,) = [t for t in asyncio.all_tasks() if "_pump_text" in t.get_coro().__qualname__]
    await stream.__aiter__().__anext__()
    stream.cancel()
    deadline = asyncio.get_running_loop().time() + 30
    while not pump.done():
        assert asyncio.get_running_loop().time() < deadline, "the text pump outlived its stream"
        await asyncio.sleep(0.01)
    assert pump.cancelled() and stream.finish_reason == "cancelled"
    assert stream.seq.text_pump is pump  # referenced while it runs
