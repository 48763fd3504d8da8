"""One request must never end another: a failure in a batched decode step, a
prefill, a text or a codec decode ends only the request that causes it, and
the others finish with exactly the audio they make without the fault."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from support.engine_requests import codes_of, collect, fixed_length, request
from ttsfleet_runtime.engine.api import EngineError, InvalidRequest, SynthesisRequest

FRAMES = 12


def three_requests():
    """A victim between two bystanders, all in one batch."""
    return [
        request(text=text, frames=FRAMES, seed=seed, request_id=rid)
        for text, seed, rid in (
            ("First bystander speaking.", 1, "left"),
            ("The request that fails.", 2, "victim"),
            ("Second bystander speaking.", 3, "right"),
        )
    ]


def running_victim(engine):
    """The victim's sequence while it holds a slot, else None (any thread)."""
    return next(
        (s for s in list(engine.scheduler.running.values()) if s.request_id == "victim"), None
    )


async def run_three(engine, patch=None):
    """Run the three requests with `patch` = (object, attribute, replacement) in
    place while they run -> {request id: (stream, pcm)}."""
    if patch is not None:
        setattr(*patch)
    try:
        streams = [engine.submit(r) for r in three_requests()]
        results = await asyncio.gather(*(collect(s) for s in streams))
    finally:
        if patch is not None:
            delattr(patch[0], patch[1])
    return {s.request_id: (s, pcm) for s, (_, pcm) in zip(streams, results, strict=True)}


async def assert_only_the_victim_fails(engine, patch, exact_audio=True):
    """The bystanders' codes and audio equal a clean run's; -> the victim's stream."""
    clean = await run_three(engine)
    faulty = await run_three(engine, patch)
    victim, _ = faulty["victim"]
    assert victim.finish_reason == "error"
    for rid in ("left", "right"):
        (stream, pcm), (clean_stream, clean_pcm) = faulty[rid], clean[rid]
        assert stream.finish_reason == "length"
        np.testing.assert_array_equal(codes_of(stream), codes_of(clean_stream))
        if exact_audio:
            assert pcm.tobytes() == clean_pcm.tobytes()
        else:
            np.testing.assert_allclose(pcm, clean_pcm, atol=1e-5)
    assert engine.stats().active == 0 and engine.stats().queue_depth == 0
    return victim


async def test_a_decode_step_that_fails_with_one_row_ends_only_that_row(make_engine):
    engine = await make_engine(max_batch=4)
    talker, state = engine.model.talker, engine.runner.state
    real_decode = talker.decode

    def decode_failing_with_the_victim(x, *args, **kwargs):
        seq = running_victim(engine)
        if seq is not None and bool(state.active[seq.slot]) and seq.frames >= 5:
            raise RuntimeError("injected fault in the victim's row")
        return real_decode(x, *args, **kwargs)

    victim = await assert_only_the_victim_fails(
        engine, (talker, "decode", decode_failing_with_the_victim)
    )
    assert victim.seq.frames == 5  # its good frames were kept up to the fault


async def test_a_lone_row_that_fails_its_step_keeps_the_real_error(make_engine):
    """With one row there is nothing to bisect: the step's own exception is
    the row's, so the server can still tell a CUDA OOM from an engine fault."""
    engine = await make_engine(max_batch=4)
    talker, state = engine.model.talker, engine.runner.state
    real_decode = talker.decode
    oom = "CUDA out of memory. Tried to allocate 2.00 GiB"

    def decode_out_of_memory(x, *args, **kwargs):
        seq = running_victim(engine)
        if seq is not None and bool(state.active[seq.slot]) and seq.frames >= 3:
            raise RuntimeError(oom)
        return real_decode(x, *args, **kwargs)

    talker.decode = decode_out_of_memory
    try:
        victim = engine.submit(request(frames=FRAMES, seed=2, request_id="victim"))
        await collect(victim)
    finally:
        del talker.decode
    assert victim.finish_reason == "error"
    assert isinstance(victim.error, EngineError) and oom in str(victim.error)
    assert isinstance(victim.error.__cause__, RuntimeError)
    assert str(victim.error.__cause__) == oom


async def test_a_prefill_that_fails_ends_only_its_request(make_engine):
    engine = await make_engine(max_batch=4)
    real_prefill = engine.runner.prefill

    def prefill_failing_for_the_victim(prompts):
        # The victim's packed call fails, then its own one-prompt retry; the
        # others' retries succeed.
        seq = running_victim(engine)
        if seq is not None and any(prompt.slot == seq.slot for prompt in prompts):
            raise RuntimeError("injected prefill fault")
        return real_prefill(prompts)

    victim = await assert_only_the_victim_fails(
        engine, (engine.runner, "prefill", prefill_failing_for_the_victim)
    )
    assert victim.seq.frames == 0 and "prefill failed" in str(victim.error)


async def test_text_that_fails_to_reach_its_slot_ends_only_its_request(make_engine):
    engine = await make_engine(max_batch=4)
    real_set_texts = engine.runner.set_texts

    def set_texts_failing_for_the_victim(texts):
        # The texts of several newcomers go in one call: it fails while it holds the
        # victim's, then the victim's own retry; the others' retries succeed.
        seq = running_victim(engine)
        if seq is not None and any(slot == seq.slot for slot, _, _ in texts):
            raise RuntimeError("injected text fault")
        return real_set_texts(texts)

    victim = await assert_only_the_victim_fails(
        engine, (engine.runner, "set_texts", set_texts_failing_for_the_victim)
    )
    assert "reading the text failed" in str(victim.error)


async def test_a_codec_decode_that_fails_for_one_stream_ends_only_that_stream(make_engine):
    engine = await make_engine(max_batch=4)
    worker = engine.codec_worker
    real_decode = worker._decode_together  # one codec call over a batch of chunks

    def decode_failing_with_the_victim(n, jobs):
        # The victim's chunks after its first delivered one.
        victim_later = (
            job.request.request_id == "victim" and job.request.stream.chunks_delivered >= 1
            for job in jobs
        )
        if any(victim_later):
            raise RuntimeError("injected codec fault")
        return real_decode(n, jobs)

    # The failed batch is decoded again one stream at a time: the codec's CPU
    # kernels sum in another order for another batch size (float rounding).
    patch = (worker, "_decode_together", decode_failing_with_the_victim)
    victim = await assert_only_the_victim_fails(engine, patch, exact_audio=False)
    assert victim.seq.chunks >= 2  # its first chunk was audio; the fault came later
    assert engine.codec.active == 0


async def test_a_streamed_text_beyond_one_utterance_ends_only_its_stream(make_engine):
    engine = await make_engine(max_batch=4, max_text_tokens=24, piece_tokens=24)
    bystander = engine.submit(request(frames=FRAMES, seed=1))

    async def endless_text():
        while True:
            yield "more words keep coming "
            await asyncio.sleep(0)

    streamed = engine.submit(
        SynthesisRequest(text=endless_text(), voice="ryan", params=fixed_length(frames=200, seed=2))
    )
    (_, pcm), _ = await asyncio.gather(collect(bystander), collect(streamed))
    assert streamed.finish_reason == "error"
    assert isinstance(streamed.error, InvalidRequest) and streamed.error.param == "text"
    assert "at most 24 text tokens" in str(streamed.error)
    assert bystander.finish_reason == "length" and len(pcm) == FRAMES * 1920


async def test_instructions_beyond_the_prefill_limit_are_refused_at_submit(make_engine):
    engine = await make_engine(max_batch=1, max_queue=1)
    long = SynthesisRequest(text="Hello.", voice="ryan", instructions="speak slowly " * 600)
    with pytest.raises(InvalidRequest, match="instructions are too long") as refused:
        engine.submit(long)
    assert refused.value.param == "instructions"
    assert engine.stats().queue_depth == 0 and engine.stats().active == 0
    fits = SynthesisRequest(
        text="Hello.",
        voice="ryan",
        instructions="speak slowly",
        params=fixed_length(frames=2, seed=1),
    )
    _, pcm = await collect(engine.submit(fits))
    assert len(pcm) == 2 * 1920


async def eventually(condition, what: str, timeout_s: float = 60) -> None:
    """Poll `condition` on the event loop until it is true, failing after `timeout_s`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("first_ends_by", ["finishing", "cancel"])
async def test_a_stream_ending_as_the_next_one_starts_shares_no_codec_slot(
    make_engine, monkeypatch, first_ends_by
):
    """Full-load churn: the codec has one slot per batch slot, so the end of a
    stream and its successor's first chunk may meet in one codec wave; the end
    must give its slot back before the successor opens one."""
    engine = await make_engine(max_batch=1, max_queue=4)
    worker = engine.codec_worker
    gate = threading.Event()
    real_process = worker._process

    def held_process(jobs):
        gate.wait(timeout=60)  # let the end and the next first chunk queue up together
        real_process(jobs)

    monkeypatch.setattr(worker, "_process", held_process)
    frames = FRAMES if first_ends_by == "finishing" else 200
    first = engine.submit(request(frames=frames, seed=1, request_id="first"))
    await eventually(lambda: first.seq.chunks >= 1, "the first stream's first chunk")
    if first_ends_by == "cancel":
        first.cancel()
    await eventually(lambda: first.seq.finished, "the first stream's end")
    second = engine.submit(request(frames=FRAMES, seed=2, request_id="second"))
    await eventually(lambda: second.seq.chunks >= 1, "the second stream's first chunk")
    gate.set()
    (_, pcm), _ = await asyncio.gather(collect(second), collect(first))
    assert second.finish_reason == "length" and len(pcm) == FRAMES * 1920
    assert engine.codec.active == 0


async def test_a_streamed_delta_that_is_not_valid_unicode_ends_only_its_stream(make_engine):
    engine = await make_engine(max_batch=4)
    bystander = engine.submit(request(frames=FRAMES, seed=1))

    async def deltas():
        yield "Hello there, "
        yield "broken \ud800 text "
        yield "and more."

    streamed = engine.submit(
        SynthesisRequest(text=deltas(), voice="ryan", params=fixed_length(frames=200, seed=2))
    )
    (_, pcm), _ = await asyncio.gather(collect(bystander), collect(streamed))
    assert streamed.finish_reason == "error"
    assert isinstance(streamed.error, InvalidRequest) and streamed.error.param == "text"
    assert "not valid Unicode" in str(streamed.error)
    assert bystander.finish_reason == "length" and len(pcm) == FRAMES * 1920


async def test_a_fault_of_a_stalled_row_is_not_blamed_on_the_runnable_ones(make_engine):
    """A row waiting for its streamed text is computed in every step but is
    never a bisection candidate: when its presence makes every step fail, the
    runnable rows that each fail alone are not the culprits, and the stalled
    one must not be spared while they are ended for it."""
    engine = await make_engine(max_batch=4)
    quiet = asyncio.Event()  # never set: the streamed text stalls

    async def deltas():
        yield "Hello there "
        await quiet.wait()

    stalled = engine.submit(
        SynthesisRequest(
            text=deltas(),
            voice="ryan",
            params=fixed_length(frames=200, seed=1),
            request_id="stalled",
        )
    )
    seq = stalled.seq
    await eventually(
        lambda: seq.frames > 0 and not seq.runnable and not seq.finished, "the row to stall"
    )
    talker = engine.model.talker
    real_decode = talker.decode

    def decode_failing_while_stalled(x, *args, **kwargs):
        if not seq.finished and not seq.runnable:
            raise RuntimeError("injected fault of the stalled row")
        return real_decode(x, *args, **kwargs)

    talker.decode = decode_failing_while_stalled
    try:
        others = [engine.submit(request(frames=FRAMES, seed=s)) for s in (2, 3)]
        await asyncio.gather(*(collect(s) for s in others))
        await eventually(lambda: seq.finished, "the stalled row to end")
    finally:
        del talker.decode
    assert seq.finish_reason == "error"
    assert "injected fault of the stalled row" in str(stalled.error)
