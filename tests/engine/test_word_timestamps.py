"""Word timestamps come from the engine's own text-to-frame alignment: each word
starts at the first frame conditioned on its first token. The reference here is
what the runner actually read: the text id each decode step added for the row
(recorded at the runner's door), not the rule the engine applies."""

from __future__ import annotations

import asyncio
import re

from support.engine_requests import PROSE, collect, fixed_length, says_eos_after_two_frames
from support.reference_model import reference_cloned_voice
from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest
from ttsfleet_runtime.engine.sequence import TextFeed
from ttsfleet_runtime.engine.text_pieces import split_text
from ttsfleet_runtime.engine.word_timing import WordClock

FRAME_S = 1 / 12.5  # the tiny 12 Hz checkpoint's frame
TEXT = "Hello there, how are you today? Antidisestablishmentarianism is long!"


def timed(text, frames=40, seed=5, **kw) -> SynthesisRequest:
    return SynthesisRequest(
        text=text,
        voice="ryan",
        language="english",
        params=fixed_length(frames=frames, seed=seed),
        timestamps=True,
        **kw,
    )


def record_text_reads(engine) -> list[tuple[int, int]]:
    """(frame conditioned, trailing text index) for slot 0, from the runner's state as
    each decode step is launched: the step with the row's frame counter at f adds
    trailing id f when it is known, and that conditions frame f + 1."""
    runner = engine.core.runner
    launch = runner.launch_decode
    reads: list[tuple[int, int]] = []

    def recording(batch, active, live_len):
        state = runner.state
        if active and active[0]:
            frame, known = int(state.frame[0]), int(state.text_len[0])
            if frame < known:
                reads.append((frame + 1, frame))
        return launch(batch, active, live_len)

    runner.launch_decode = recording
    return reads


def reference_word_starts(engine, text: str, reads: list[tuple[int, int]]) -> dict[str, float]:
    """Each word's start from what the runner read: the prompt's text id (token 0)
    conditions frame 0; trailing index t is token t + 1 (a voice without reference)."""
    _, offsets = engine.builder.tokenizer.encode_offsets(text)
    first_frame = {0: 0} | {t + 1: frame for frame, t in reads}
    starts = {}
    for word in re.finditer(r"\S+", text):
        token = next(i for i, (a, b) in enumerate(offsets) if a <= word.start() < b)
        if token in first_frame:
            starts[word.group()] = first_frame[token] * FRAME_S
    return starts


def words_of(chunks):
    return [w for c in chunks for w in c.words]


async def test_word_starts_are_the_frames_that_read_their_first_token(make_engine):
    engine = await make_engine(max_batch=2, first_chunk_frames=2, chunk_frames=4)
    reads = record_text_reads(engine)
    chunks, pcm = await collect(engine.submit(timed(TEXT, frames=40)))

    words = words_of(chunks)
    expected = reference_word_starts(engine, TEXT, reads)
    assert [w.word for w in words] == TEXT.split()  # 40 frames read the whole text
    for w in words:  # within one frame of what the runner read: here exactly equal
        assert abs(w.start_s - expected[w.word]) < 1e-9, w.word
    # A word ends where the next starts; the last at the end of the audio.
    assert [w.end_s for w in words[:-1]] == [w.start_s for w in words[1:]]
    assert abs(words[-1].end_s - len(pcm) / 24000) < 1e-9
    # The characters are the text's, each timed inside its word.
    assert "".join(ch for w in words for ch in w.characters) == TEXT
    for w in words:
        assert all(
            w.start_s <= s <= e <= w.end_s
            for s, e in zip(w.char_start_s, w.char_end_s, strict=True)
        )


async def test_words_arrive_with_the_audio_not_at_the_end(make_engine):
    engine = await make_engine(max_batch=1, first_chunk_frames=2, chunk_frames=4)
    chunks, _ = await collect(engine.submit(timed(TEXT, frames=40)))
    # The text is read a token a frame: its words are timed long before the last chunk,
    # which brings only the last word (it ends with the audio).
    assert chunks[0].words and chunks[0].words[0].word == "Hello"
    assert [w.word for w in chunks[-1].words] == ["long!"]
    # Each word is handed out no later than the chunk whose audio it starts in.
    audio_until = 0.0
    for chunk in chunks:
        audio_until += chunk.duration_s
        assert all(w.start_s < audio_until for w in chunk.words)


async def test_a_streamed_text_gets_the_same_word_times_as_the_whole_text(make_engine):
    engine = await make_engine(max_batch=2)
    whole, _ = await collect(engine.submit(timed(TEXT, frames=40, seed=9)))

    async def deltas():
        # Slower than the engine's steps: the row stalls for text between words,
        # and cut inside words, so a word is timed only once its last token is known.
        for i in range(0, len(TEXT), 7):
            await asyncio.sleep(0.03)
            yield TEXT[i : i + 7]

    streamed, _ = await collect(engine.submit(timed(deltas(), frames=40, seed=9)))
    assert words_of(streamed) == words_of(whole)


async def test_the_length_cap_times_only_the_words_it_read(make_engine):
    engine = await make_engine(max_batch=1)
    chunks, pcm = await collect(engine.submit(timed(TEXT, frames=7)))
    words = words_of(chunks)
    assert [w.word for w in words] == ["Hello", "there,", "how"]
    assert words[-1].end_s == 7 * FRAME_S == len(pcm) / 24000


async def test_without_the_option_chunks_carry_no_words(make_engine):
    engine = await make_engine(max_batch=1)
    chunks, _ = await collect(
        engine.submit(
            SynthesisRequest(text=TEXT, voice="ryan", params=fixed_length(frames=8, seed=1))
        )
    )
    assert not words_of(chunks)


async def test_long_text_pieces_continue_the_clock_and_the_text(make_engine):
    engine = await make_engine(max_batch=1)
    says_eos_after_two_frames(engine)
    text = PROSE * 8
    pieces = split_text(text, lambda t: len(engine.builder.text_ids(t)), engine.piece_tokens)
    assert len(pieces) > 1
    stream = engine.submit(
        SynthesisRequest(text=text, voice="ryan", params=SamplingParams(seed=7), timestamps=True)
    )
    chunks, _ = await collect(stream)
    words = words_of(chunks)
    # Each piece is 2 frames: its first word starts where the piece does.
    starts = [w.start_s for w in words]
    for k, piece in enumerate(pieces):
        first = piece.split()[0]
        assert any(w.word == first and w.start_s == 2 * k * FRAME_S for w in words), k
    assert starts == sorted(starts)
    # Characters point into the request's text, whitespace between pieces included.
    for w in words:
        assert "".join(w.characters) == text[w.text_offset : w.text_offset + len(w.characters)]


def test_an_in_context_clone_reads_its_text_after_the_transcript():
    """A clone with a 3-token transcript and 5 reference frames: the prompt takes
    6 stream ids (transcript and the first 3 text tokens), so text token k is first
    read at frame max(0, 3 + k - 5)."""

    def encode_offsets(text):
        spans = [(m, m + 1) for m in range(len(text))]  # a token a character
        return list(range(len(text))), spans

    feed = TextFeed(str.split, "ab cd ef", encode_offsets=encode_offsets)
    feed.refresh()
    clock = WordClock(10.0, prompt_text_ids=6, lead_ids=3, text="ab cd ef")
    for frame in range(8):
        clock.frame_made(frame, frame, feed)
    clock.piece_ended(8)
    words = [mark.timed() for mark in clock.take()]
    # Tokens: a b _ c d _ e f -> read at frames 0 0 0 1 2 3 4 5.
    assert [(w.word, w.start_s, w.end_s) for w in words] == [
        ("ab", 0.0, 0.1),
        ("cd", 0.1, 0.4),
        ("ef", 0.4, 0.8),
    ]


async def test_at_25_hz_a_frame_is_40_ms_and_held_back_words_come_with_the_audio(
    make_engine, tiny_25hz_custom_voice
):
    """The 25 Hz decoder holds audio back until a DiT block's look-ahead arrives:
    the words timed meanwhile wait for the next chunk with audio, none is lost."""
    engine = await make_engine(tiny_25hz_custom_voice, max_batch=1)
    chunks, pcm = await collect(engine.submit(timed(TEXT, frames=60)))
    words = words_of(chunks)
    assert [w.word for w in words] == TEXT.split()
    _, offsets = engine.builder.tokenizer.encode_offsets(TEXT)
    for word in re.finditer(r"\S+", TEXT):
        token = next(i for i, (a, b) in enumerate(offsets) if a <= word.start() < b)
        timed_word = next(w for w in words if w.word == word.group())
        assert abs(timed_word.start_s - token / 25) < 1e-9
    assert abs(words[-1].end_s - len(pcm) / 24000) < 1e-9 and len(pcm) == 60 * 960


async def test_an_in_context_clone_times_words_by_what_the_runner_read(make_engine, tiny_base):
    """A clone's prompt holds its transcript and the text's first tokens beside the
    recording's frames: those words start at frame 0, later ones where the runner
    read them, W - r tokens of the text ahead of the frame count."""
    engine = await make_engine(tiny_base, max_batch=1)
    cloned = reference_cloned_voice(tiny_base, 1.0, "A short reference.")
    reads = record_text_reads(engine)
    text = "Hello world, this is a cloned voice speaking through the engine today."
    chunks, _ = await collect(
        engine.submit(
            SynthesisRequest(
                text=text,
                cloned_voice=cloned,
                language="english",
                params=fixed_length(frames=40, seed=3),
                timestamps=True,
            )
        )
    )
    voice = engine.builder.voice(None, None, "english", cloned)
    lead, width = len(voice.ref_text_ids), voice.prompt_text_ids
    assert width - lead > 1  # the prompt holds several text tokens
    # Trailing index t is stream id width + t: text token width + t - lead.
    first_frame = dict.fromkeys(range(width - lead), 0) | {
        width + t - lead: frame for frame, t in reads
    }
    _, offsets = engine.builder.tokenizer.encode_offsets(text)
    words = {w.word: w for w in words_of(chunks)}
    assert list(words) == text.split()
    for word in re.finditer(r"\S+", text):
        token = next(i for i, (a, b) in enumerate(offsets) if a <= word.start() < b)
        assert abs(words[word.group()].start_s - first_frame[token] * FRAME_S) < 1e-9
    assert words["Hello"].start_s == words["world,"].start_s == 0.0


def test_a_character_split_over_byte_tokens_is_timed_once():
    """Byte-level BPE can split one character (an emoji) over two tokens that both
    name it: it must appear once, so the characters still spell the text."""

    def encode_offsets(text):  # "a 😀b": tokens a, " ", two halves of the emoji, b
        return [1, 2, 3, 4, 5], [(0, 1), (1, 2), (2, 3), (2, 3), (3, 4)]

    feed = TextFeed(str.split, "a 😀b", encode_offsets=encode_offsets)
    feed.refresh()
    clock = WordClock(10.0, prompt_text_ids=1, lead_ids=0, text="a 😀b")
    for frame in range(5):
        clock.frame_made(frame, frame, feed)
    clock.piece_ended(5)
    words = [mark.timed() for mark in clock.take()]
    assert [w.word for w in words] == ["a", "😀b"]
    assert "".join(c for w in words for c in w.characters) == "a 😀b"
    assert words[1].char_start_s == (0.2, 0.2, 0.4)  # the space (no time), the emoji, b
