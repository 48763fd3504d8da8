"""Long text (the API's 4,096 characters) is spoken piece after piece into one
stream: one request, one slot, chunks numbered on across the pieces."""

from __future__ import annotations

import threading

from support.engine_requests import PROSE, collect, says_eos_after_two_frames
from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest
from ttsfleet_runtime.engine.text_pieces import split_text


async def test_4000_characters_of_prose_are_one_complete_stream(make_engine):
    engine = await make_engine(max_batch=2)
    says_eos_after_two_frames(engine)
    text = (PROSE * 20)[:4000]
    pieces = split_text(text, lambda t: len(engine.builder.text_ids(t)), engine.piece_tokens)
    assert len(pieces) > 3

    stream = engine.submit(SynthesisRequest(text=text, voice="ryan", params=SamplingParams(seed=7)))
    chunks, pcm = await collect(stream)

    assert stream.finish_reason == "eos"
    assert stream.seq.piece == len(pieces) - 1  # every piece was spoken
    assert sum(c.frames for c in chunks) == 2 * len(pieces) == stream.seq.frames
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert len(pcm) == 2 * len(pieces) * 1920
    assert engine.stats().active == 0


async def test_a_text_that_fits_is_one_piece(make_engine):
    engine = await make_engine(max_batch=1)
    says_eos_after_two_frames(engine)
    stream = engine.submit(
        SynthesisRequest(text=PROSE, voice="ryan", params=SamplingParams(seed=7))
    )
    await collect(stream)
    assert stream.finish_reason == "eos" and stream.seq.piece == 0 and stream.seq.frames == 2


async def test_a_whole_text_is_tokenised_once_by_its_submitter(make_engine):
    """Admission tokenises a text to split it; the engine thread reuses those ids
    for the first piece instead of tokenising it again."""
    engine = await make_engine(max_batch=1)
    says_eos_after_two_frames(engine)
    encode = engine.builder.tokenizer.encode
    calls: list[tuple[str, str]] = []

    def counting(text: str) -> list[int]:
        calls.append((threading.current_thread().name, text))
        return encode(text)

    engine.builder.tokenizer.encode = counting
    stream = engine.submit(
        SynthesisRequest(text=PROSE, voice="ryan", params=SamplingParams(seed=7))
    )
    await collect(stream)
    assert stream.finish_reason == "eos" and stream.seq.text.ids == encode(PROSE)
    assert calls == [(threading.current_thread().name, PROSE)]


async def test_the_frame_budget_covers_the_whole_long_text(make_engine):
    engine = await make_engine(max_batch=1)
    says_eos_after_two_frames(engine)
    stream = engine.submit(
        SynthesisRequest(
            text=(PROSE * 20)[:4000], voice="ryan", params=SamplingParams(seed=7, max_frames=5)
        )
    )
    chunks, _ = await collect(stream)
    assert stream.finish_reason == "length" and sum(c.frames for c in chunks) == 5
