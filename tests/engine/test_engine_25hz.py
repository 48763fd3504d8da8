"""A 25 Hz checkpoint end to end through the engine: one-code frames without a code
predictor, the DiT decoder behind the codec worker, and the frame rate (25 frames of
960 samples a second) wherever the engine turns frames into seconds."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
import torch

from support.engine_requests import request
from support.playing_sequence import PlayingSequence
from ttsfleet_runtime.engine.kv_blocks import stream_blocks
from ttsfleet_runtime.engine.tts_engine import TTSEngine
from ttsfleet_runtime.speech_tokenizer.rate25 import (
    StreamingDecoder25Hz,
    load_speech_tokenizer_25hz,
)

BLOCK = 12  # codes of one DiT block of the tiny 25 Hz tokenizer


@pytest.fixture
async def engine(make_engine, tiny_25hz_custom_voice):
    return await make_engine(tiny_25hz_custom_voice, max_batch=4)


def test_the_frame_rate_comes_from_the_checkpoints_speech_tokenizer(
    tiny_25hz_custom_voice, tiny_checkpoint
):
    hz25 = TTSEngine.from_pretrained(str(tiny_25hz_custom_voice), "cpu").info
    hz12 = TTSEngine.from_pretrained(str(tiny_checkpoint), "cpu").info
    assert (hz25.tokenizer_rate_hz, hz25.frame_rate_hz, hz25.samples_per_frame) == (25, 25.0, 960)
    assert (hz12.tokenizer_rate_hz, hz12.frame_rate_hz, hz12.samples_per_frame) == (12, 12.5, 1920)
    # The KV pool's start-up check sizes a 10 s stream at the checkpoint's rate.
    assert stream_blocks(10, 25.0, 16) == -(-(64 + 250) // 16)
    assert stream_blocks(10, 12.5, 16) == -(-(64 + 125) // 16)


def test_chunks_are_whole_dit_blocks(tiny_25hz_custom_voice):
    core = TTSEngine.from_pretrained(
        str(tiny_25hz_custom_voice), "cpu", first_chunk_frames=2, chunk_frames=8
    ).core
    assert core.rules.chunk_sizes() == (BLOCK,)
    longer = TTSEngine.from_pretrained(
        str(tiny_25hz_custom_voice), "cpu", first_chunk_frames=13, chunk_frames=30
    ).core
    assert longer.rules.chunk_sizes() == (2 * BLOCK, 3 * BLOCK)


async def test_a_25hz_talker_steps_without_a_code_predictor(engine):
    assert engine.model.predictor is None
    assert engine.runner.predictor_cache is None
    stream = engine.submit(request(frames=5, seed=2))
    async for _ in stream:
        pass
    codes = np.stack(stream.seq.all_codes)
    assert codes.shape == (5, 1)
    assert (codes < engine.model.config.codebook_size).all()


async def test_streamed_audio_is_the_decoders_audio_of_the_generated_codes(
    engine, tiny_25hz_custom_voice
):
    frames = 3 * BLOCK + 5  # a partial block at the end: `finish` makes it
    stream = engine.submit(request(frames=frames, seed=4))
    chunks = [chunk async for chunk in stream]
    assert stream.finish_reason == "length"
    assert [c.index for c in chunks] == list(range(len(chunks)))
    # The first block's audio is final once the second block's codes are in: the
    # first chunk (12 codes) makes no audio and its frames go with the next one.
    assert chunks[0].frames == 2 * BLOCK and len(chunks[0].pcm) == BLOCK * 960
    assert sum(c.frames for c in chunks) == frames
    audio = np.concatenate([c.pcm for c in chunks])
    assert len(audio) == frames * 960

    # The same codes through the decoder alone, in one call and finished.
    codes = torch.from_numpy(np.stack(stream.seq.all_codes)[:, 0])[None]
    folder = tiny_25hz_custom_voice / "speech_tokenizer"
    decoder = StreamingDecoder25Hz(load_speech_tokenizer_25hz(folder, "cpu"), 1, "cpu")
    slot = decoder.open(None)
    alone = torch.cat(decoder.decode([slot], codes) + decoder.finish([slot])).numpy()
    np.testing.assert_allclose(audio, alone, atol=1e-5)


async def test_streams_batch_and_a_cancel_frees_the_decoders_slot(engine):
    keep = engine.submit(request(frames=2 * BLOCK, seed=5))
    cancel = engine.submit(request(frames=40 * BLOCK, seed=6))
    async for _ in cancel:
        cancel.cancel()
    got = [chunk async for chunk in keep]
    assert cancel.finish_reason == "cancelled"
    assert keep.finish_reason == "length" and sum(c.frames for c in got) == 2 * BLOCK
    for _ in range(100):
        if engine.codec.active == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.codec.active == 0


@dataclasses.dataclass
class HeldStream:
    first_audio_at: float
    audio_delivered_s: float
    frames_decoded: int


def test_frames_the_decoder_holds_back_are_not_audio_on_its_way(tiny_25hz_custom_voice):
    core = TTSEngine.from_pretrained(str(tiny_25hz_custom_voice), "cpu").core
    core.step_s = 0.01
    # 24 codes decoded, one block (0.48 s) of them heard-able, playing for 0.3 s: the
    # second block's audio needs the next block's 12 codes, so 12 steps are owed.
    held = PlayingSequence(HeldStream(100.0 - 0.3, 0.48, 24), frames=24, pending=[], chunks=2)
    core.scheduler.running[0] = held
    assert core._sample_leads(100.0) == pytest.approx(0.48 - 0.3 - BLOCK * 0.01)


async def test_an_in_context_clone_speaks_only_its_own_audio(make_engine, tiny_25hz_base):
    """The recording's codes are primed into the decoder and their audio dropped, also
    the blocks the DiT makes final only once the generated codes arrive."""
    from ttsfleet_runtime.engine.api import SynthesisRequest

    engine = await make_engine(tiny_25hz_base, max_batch=2)
    rate = engine.info.sample_rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(rate * 2) / rate)).astype(np.float32)
    cloned = engine.clone_voice(tone, rate, "A tone.")
    assert cloned.ref_codes.ndim == 1 and cloned.xvector is not None
    frames = 2 * BLOCK + 3
    stream = engine.submit(
        SynthesisRequest(
            text="Hello there.", cloned_voice=cloned, params=request(frames=frames, seed=1).params
        )
    )
    chunks = [chunk async for chunk in stream]
    assert stream.finish_reason == "length"
    assert sum(c.frames for c in chunks) == frames
    assert sum(len(c.pcm) for c in chunks) == frames * 960
