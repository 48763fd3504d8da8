"""Streaming: the first chunk after `first_chunk_frames`, then chunks that double
up to `chunk_frames`;
the streamed audio equals decoding all codes at once; text may arrive as a
stream of deltas."""

from __future__ import annotations

import asyncio

import numpy as np

from support.engine_requests import codes_of, collect, fixed_length, record_codec_calls, request
from ttsfleet_runtime.engine.api import SynthesisRequest
from ttsfleet_runtime.speech_tokenizer.rate12.decoder import load_speech_tokenizer


async def test_chunk_sizes_ramp_from_the_first_chunk_to_chunk_frames(make_engine):
    engine = await make_engine(max_batch=2, first_chunk_frames=1, chunk_frames=4)
    chunks, _ = await collect(engine.submit(request(frames=13, seed=1)))
    assert [c.frames for c in chunks] == [1, 1, 2, 4, 4, 1]
    assert [c.index for c in chunks] == [0, 1, 2, 3, 4, 5]
    assert all(c.sample_rate == 24000 and c.pcm.dtype == np.float32 for c in chunks)
    assert all(c.t_emitted >= c.t_admitted for c in chunks)


async def test_streamed_audio_equals_offline_decode_of_the_codes(make_engine, tiny_checkpoint):
    engine = await make_engine(max_batch=2, first_chunk_frames=2, chunk_frames=3)
    stream = engine.submit(request(frames=9, seed=4))
    _, pcm = await collect(stream)
    decoder = load_speech_tokenizer(tiny_checkpoint / "speech_tokenizer")
    import torch

    offline = decoder.decode(torch.from_numpy(codes_of(stream))[None])[0].numpy()
    np.testing.assert_allclose(pcm, offline, atol=1e-5)


async def test_text_stream_gives_the_same_codes_as_the_whole_text(make_engine):
    engine = await make_engine(max_batch=2)
    text = "Streaming text arrives word by word from a language model."
    whole = engine.submit(request(text=text, frames=8, seed=9))
    await collect(whole)

    async def deltas():
        # Slower than the engine's steps: the request stalls waiting for text.
        for word in text.split(" "):
            await asyncio.sleep(0.05)
            yield word + " "

    streamed = engine.submit(
        SynthesisRequest(
            text=deltas(), voice="ryan", language="english", params=fixed_length(frames=8, seed=9)
        )
    )
    chunks, _ = await collect(streamed)
    assert streamed.finish_reason == "length"
    np.testing.assert_array_equal(codes_of(streamed), codes_of(whole))


async def test_a_failing_text_stream_ends_the_request_with_error(make_engine):
    engine = await make_engine(max_batch=2)

    async def broken():
        yield "Hello "
        raise RuntimeError("upstream LLM went away")

    stream = engine.submit(
        SynthesisRequest(text=broken(), voice="ryan", params=fixed_length(frames=50, seed=1))
    )
    await collect(stream)
    assert stream.finish_reason == "error"
    assert engine.stats().active == 0


async def test_a_short_last_chunk_is_padded_to_a_captured_frame_count_and_cut_back(
    make_engine, tiny_checkpoint
):
    """On a GPU only frame counts with a captured codec graph are fast; a stream's
    short last chunk is decoded padded up to one of them (CPU: set by hand here)
    and its audio cut back to its own frames, sample for sample."""
    engine = await make_engine(max_batch=2, first_chunk_frames=2, chunk_frames=3)
    engine.codec_worker.frame_buckets = (2, 3)
    decoded_lengths = record_codec_calls(engine)
    stream = engine.submit(request(frames=8, seed=4))
    chunks, pcm = await collect(stream)
    assert [c.frames for c in chunks] == [2, 2, 3, 1]
    assert decoded_lengths == [2, 2, 3, 2]  # the 1-frame last chunk ran as 2 frames
    assert len(chunks[-1].pcm) == 1920
    decoder = load_speech_tokenizer(tiny_checkpoint / "speech_tokenizer")
    import torch

    offline = decoder.decode(torch.from_numpy(codes_of(stream))[None])[0].numpy()
    np.testing.assert_allclose(pcm, offline, atol=1e-5)


async def test_only_deltas_that_complete_a_word_wake_the_engine(make_engine):
    """An LLM's deltas are a few characters: most end inside a word, and commit no id
    (the word may go on). Waking the engine thread for each cost an iteration and a
    plan per delta under load (issue 36); only a delta with whitespace, and the end of
    the text, may let a row step."""
    engine = await make_engine(max_batch=2)
    text = "Streaming text arrives word by word from a language model, four characters at a time."
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    wakes = 0
    wake = engine.core.wake

    def counted_wake():
        nonlocal wakes
        wakes += 1
        wake()

    engine.core.wake = counted_wake

    async def deltas():
        for piece in pieces:
            yield piece

    streamed = engine.submit(
        SynthesisRequest(
            text=deltas(), voice="ryan", language="english", params=fixed_length(frames=6, seed=9)
        )
    )
    await collect(streamed)
    assert streamed.finish_reason == "length"
    with_space = sum(" " in piece for piece in pieces)
    assert with_space < len(pieces)
    # Those deltas, the submission and the text's end.
    assert wakes <= with_space + 2


async def test_a_row_waiting_for_text_does_not_hold_back_the_others(make_engine):
    """An agent's LLM may pause mid-sentence: its row waits in its slot for text, and
    the other rows step on without it (it is no row of their steps)."""
    engine = await make_engine(max_batch=2)
    more_text = asyncio.Event()

    async def paused_llm():
        yield "Hello there, "
        await more_text.wait()
        yield "and goodbye."

    waiting = engine.submit(
        SynthesisRequest(
            text=paused_llm(),
            voice="ryan",
            language="english",
            params=fixed_length(frames=6, seed=3),
        )
    )
    whole = engine.submit(request(frames=12, seed=4))
    await asyncio.wait_for(collect(whole), timeout=120)
    assert whole.finish_reason == "length" and len(codes_of(whole)) == 12
    assert waiting.finish_reason is None  # still waiting for its text, in its slot
    assert waiting.seq.frames < 6
    more_text.set()
    await asyncio.wait_for(collect(waiting), timeout=120)
    assert waiting.finish_reason == "length"
