"""Admission is decided at submit: queued, or refused with a reason, holding nothing."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from support.engine_requests import collect, request
from ttsfleet_runtime.engine.api import (
    EngineStopped,
    InvalidRequest,
    QueueFull,
    SamplingParams,
    SynthesisRequest,
)


async def test_queue_bound_refuses_with_a_retry_hint(make_engine):
    engine = await make_engine(max_batch=1, max_queue=1)
    running = engine.submit(request(frames=30, seed=1))
    await running.__aiter__().__anext__()  # it holds the only slot now
    queued = engine.submit(request(frames=2, seed=2))
    with pytest.raises(QueueFull) as refused:
        engine.submit(request(frames=2, seed=3))
    assert refused.value.retry_after_s > 0
    assert engine.stats().queue_depth == 1
    running.cancel()
    _, pcm = await collect(queued)
    assert queued.finish_reason == "length" and len(pcm) == 2 * 1920


async def test_a_full_queue_refuses_before_any_tokenising(make_engine, monkeypatch):
    engine = await make_engine(max_batch=1, max_queue=1)
    running = engine.submit(request(frames=30, seed=1))
    await running.__aiter__().__anext__()  # it holds the only slot now
    engine.submit(request(frames=2, seed=2))  # and this one the only queue place
    tokenised = []
    real_encode = engine.builder.tokenizer.encode
    monkeypatch.setattr(
        engine.builder.tokenizer, "encode", lambda text: tokenised.append(text) or real_encode(text)
    )
    refused = SynthesisRequest(text="word " * 800, voice="ryan", instructions="speak slowly")
    with pytest.raises(QueueFull):
        engine.submit(refused)
    assert tokenised == []
    running.cancel()


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(voice="nobody"), "unknown voice"),
        (dict(voice=None), "voice is required"),
        (dict(language="klingon"), "unknown language"),
        (dict(text="   "), "text is empty"),
        (dict(params=SamplingParams(top_p=0)), "top_p"),
        (dict(params=SamplingParams(max_frames=4, min_frames=5)), "min_frames"),
        (dict(params=SamplingParams(seed=2**64)), "seed"),
    ],
)
async def test_invalid_requests_are_refused_with_a_reason(make_engine, change, message):
    engine = await make_engine(max_batch=1, max_queue=1)
    base = SynthesisRequest(text="Hello.", voice="ryan", language="english")
    with pytest.raises(InvalidRequest, match=message) as refused:
        engine.submit(dataclasses.replace(base, **change))
    assert refused.value.param in message
    assert engine.stats().queue_depth == 0 and engine.stats().active == 0


async def test_stop_drains_running_streams_then_refuses(make_engine):
    engine = await make_engine(max_batch=2)
    stream = engine.submit(request(frames=3, seed=5))
    result = asyncio.ensure_future(collect(stream))
    await engine.stop(drain_timeout_s=30)
    _, pcm = await result
    assert stream.finish_reason == "length" and len(pcm) == 3 * 1920
    assert not engine.ready
    with pytest.raises(EngineStopped):
        engine.submit(request(frames=1, seed=1))


async def test_stop_cancels_what_outlives_the_drain_deadline(make_engine):
    engine = await make_engine(max_batch=1)
    stream = engine.submit(request(frames=500, seed=5))
    await stream.__aiter__().__anext__()
    await engine.stop(drain_timeout_s=0)
    assert stream.finish_reason == "shutdown"


@pytest.mark.parametrize("field", ["text", "instructions"])
async def test_text_that_is_not_valid_unicode_is_refused_with_its_field(make_engine, field):
    engine = await make_engine(max_batch=1, max_queue=1)
    bad = SynthesisRequest(text="Hello.", voice="ryan", instructions="speak slowly")
    bad = dataclasses.replace(bad, **{field: "hi \ud800 there"})
    with pytest.raises(InvalidRequest, match="not valid Unicode") as refused:
        engine.submit(bad)
    assert refused.value.param == field
    assert engine.stats().queue_depth == 0 and engine.stats().active == 0


async def test_an_interactive_request_runs_beside_a_batch_that_fills_the_engine(make_engine):
    # max_batch 4: batch rows may hold 3 slots; the queue bound (1) counts no batch row.
    engine = await make_engine(max_batch=4, max_queue=1)
    batch = [
        engine.submit(dataclasses.replace(request(frames=400, seed=i), priority="batch"))
        for i in range(6)
    ]
    for stream in batch[:3]:
        await stream.__aiter__().__anext__()  # three batch rows hold slots
    assert (engine.stats().active, engine.stats().queue_depth) == (3, 0)

    caller = engine.submit(request(frames=2, seed=9))  # not refused: no interactive one waits
    _, pcm = await collect(caller)
    assert caller.finish_reason == "length" and len(pcm) == 2 * 1920
    assert all(s.finish_reason is None for s in batch)  # it did not wait for a batch row
    for stream in batch:
        stream.cancel()
