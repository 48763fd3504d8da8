"""One request must never end another: a failure in a batched decode step, a
prefill, a text or a codec decode ends only the request that causes it, and
the others finish with exactly the audio they make without the fault."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from helpers import codes_of, collect, fixed_length, request
from ttsfleet_runtime.engine.api import InvalidRequest, SynthesisRequest

FRAMES = 12


def three_requests():
    """A victim between two bystanders, all in one batch."""
    return [request(text=text, frames=FRAMES, seed=seed, request_id=rid)
            for text, seed, rid in (("First bystander speaking.", 1, "left"),
                                    ("The request that fails.", 2, "victim"),
                                    ("Second bystander speaking.", 3, "right"))]


async def run_all(engine, requests):
    streams = [engine.submit(r) for r in requests]
    results = await asyncio.gather(*(collect(s) for s in streams))
    return {s.request_id: (s, pcm) for s, (_, pcm) in zip(streams, results)}


async def assert_bystanders_unharmed(engine, faulty_run, exact_audio=True):
    clean = await run_all(engine, three_requests())
    faulty = await faulty_run()
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
    real_forward = talker.forward
    victim: list = []

    def forward_failing_with_the_victim(x, *args, **kwargs):
        seq = victim[0].seq if victim else None
        decode_step = x.shape[1] == 1
        if decode_step and seq is not None and seq.slot is not None and bool(state.active[seq.slot]) \
                and seq.frames >= 5:
            raise RuntimeError("injected fault in the victim's row")
        return real_forward(x, *args, **kwargs)

    async def faulty_run():
        talker.forward = forward_failing_with_the_victim
        try:
            streams = [engine.submit(r) for r in three_requests()]
            victim.append(streams[1])
            results = await asyncio.gather(*(collect(s) for s in streams))
        finally:
            del talker.forward
        return {s.request_id: (s, pcm) for s, (_, pcm) in zip(streams, results)}

    victim_stream = await assert_bystanders_unharmed(engine, faulty_run)
    assert victim_stream.seq.frames == 5  # its good frames were kept up to the fault


async def test_a_prefill_that_fails_ends_only_its_request(make_engine):
    engine = await make_engine(max_batch=4)
    real_prefill = engine.runner.prefill

    def prefill_failing_for_the_victim(slot, embeds, params):
        if params.seed == 2:
            raise RuntimeError("injected prefill fault")
        return real_prefill(slot, embeds, params)

    async def faulty_run():
        engine.runner.prefill = prefill_failing_for_the_victim
        try:
            return await run_all(engine, three_requests())
        finally:
            del engine.runner.prefill

    victim = await assert_bystanders_unharmed(engine, faulty_run)
    assert victim.seq.frames == 0 and "prefill failed" in str(victim.error)


async def test_a_codec_decode_that_fails_for_one_stream_ends_only_that_stream(make_engine):
    engine = await make_engine(max_batch=4)
    codec = engine.codec
    real_decode = codec.decode
    victim: list = []

    def decode_failing_with_the_victim(slots, codes):
        if victim and victim[0].seq.codec_slot in slots and victim[0].seq.chunks > 1:
            raise RuntimeError("injected codec fault")
        return real_decode(slots, codes)

    async def faulty_run():
        codec.decode = decode_failing_with_the_victim
        try:
            streams = [engine.submit(r) for r in three_requests()]
            victim.append(streams[1])
            results = await asyncio.gather(*(collect(s) for s in streams))
        finally:
            del codec.decode
        return {s.request_id: (s, pcm) for s, (_, pcm) in zip(streams, results)}

    # The failed batch is decoded again one stream at a time: the codec's CPU
    # kernels sum in another order for another batch size (float rounding).
    await assert_bystanders_unharmed(engine, faulty_run, exact_audio=False)
    assert engine.codec.active == 0


async def test_a_streamed_text_beyond_one_utterance_ends_only_its_stream(make_engine):
    engine = await make_engine(max_batch=4, max_text_tokens=24, piece_tokens=24)
    bystander = engine.submit(request(frames=FRAMES, seed=1))

    async def endless_text():
        while True:
            yield "more words keep coming "
            await asyncio.sleep(0)

    streamed = engine.submit(SynthesisRequest(text=endless_text(), voice="ryan",
                                              params=fixed_length(frames=200, seed=2)))
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
    fits = SynthesisRequest(text="Hello.", voice="ryan", instructions="speak slowly",
                            params=fixed_length(frames=2, seed=1))
    _, pcm = await collect(engine.submit(fits))
    assert len(pcm) == 2 * 1920
