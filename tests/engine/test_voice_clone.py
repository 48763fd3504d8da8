"""A Base checkpoint speaks cloned voices through the engine: in context (the
reference recording's transcript and codes before the text) and x-vector only (its
speaker embedding), batched together, with the audio of qwen-tts'
`generate_voice_clone` (the recording's codes decoded with the generated ones and
its part of the waveform cut off). Other variants refuse cloned voices and serve on.

The voices are the reference's own (its speaker encoder and speech tokenizer); CPU,
float32."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch

from support.engine_requests import codes_of, collect, record_codec_calls
from support.reference_model import (
    reference_cloned_voice,
    reference_model,
    reference_speech_tokenizer,
)
from ttsfleet_runtime.engine.api import InvalidRequest, SamplingParams, SynthesisRequest
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer
from ttsfleet_runtime.speech_tokenizer.rate12.decoder import load_speech_tokenizer

TEXT = "Hello world, this is a cloned voice speaking through the engine."
TRANSCRIPT = "A short reference."
FRAMES = 12
GREEDY = SamplingParams(
    temperature=0.0, subtalker_temperature=0.0, max_frames=FRAMES, min_frames=FRAMES, seed=0
)


@pytest.fixture
def make_base_engine(make_engine, tiny_base):
    return functools.partial(make_engine, tiny_base)


def clone_request(cloned, text: str = TEXT, params: SamplingParams = GREEDY) -> SynthesisRequest:
    return SynthesisRequest(text=text, cloned_voice=cloned, language="english", params=params)


def reference_voice_clone(checkpoint, cloned, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """qwen-tts' generate_voice_clone for one voice, greedy, fixed length:
    -> (codes [frames, 16], waveform after the cut)."""
    ref = reference_model(checkpoint)
    tok = TextTokenizer.from_checkpoint(checkpoint)
    ids = torch.tensor(
        [tok.encode(f"<|im_start|>assistant\n{TEXT}<|im_end|>\n<|im_start|>assistant\n")]
    )
    ref_ids = [torch.tensor([tok.encode(f"<|im_start|>assistant\n{cloned.ref_text}<|im_end|>\n")])]
    ref_codes = torch.from_numpy(cloned.ref_codes)
    prompt = dict(
        ref_code=[ref_codes],
        ref_spk_embedding=[torch.from_numpy(cloned.speaker_embedding)],
        x_vector_only_mode=[False],
        icl_mode=[True],
    )
    with torch.no_grad():
        (codes,), _ = ref.generate(
            input_ids=[ids],
            ref_ids=ref_ids,
            voice_clone_prompt=prompt,
            languages=["english"],
            non_streaming_mode=False,
            max_new_tokens=frames + 1,
            do_sample=False,
            subtalker_dosample=False,
        )
        # generate_voice_clone's decode and cut, as it is written there.
        together = torch.cat([ref_codes, codes])
        tokenizer = reference_speech_tokenizer(checkpoint / "speech_tokenizer")
        (wavs,) = tokenizer.decode(together[None], return_dict=False)
    wav = wavs[0].numpy()
    cut = int(len(ref_codes) / max(len(together), 1) * wav.shape[0])
    return codes.numpy(), wav[cut:]


async def test_in_context_clone_speaks_the_reference_codes_and_waveform(
    make_base_engine, tiny_base
):
    engine = await make_base_engine(max_batch=2)
    assert engine.info.variant == "Base" and engine.info.supports_voice_clone
    cloned = reference_cloned_voice(tiny_base, 1.0, TRANSCRIPT)
    stream = engine.submit(clone_request(cloned))
    _, pcm = await collect(stream)
    assert stream.finish_reason == "length"
    codes, waveform = reference_voice_clone(tiny_base, cloned, FRAMES)
    np.testing.assert_array_equal(codes_of(stream), codes)
    assert pcm.shape == waveform.shape == (FRAMES * 1920,)
    assert waveform.std() > 0.01  # a silent waveform would prove nothing
    # Our decoder against the reference's, as tests/codec/test_reference_parity.py.
    np.testing.assert_allclose(pcm, waveform, atol=2e-4, rtol=1e-3)


async def test_streamed_audio_equals_decoding_reference_and_generated_codes_cut(
    make_base_engine, tiny_base
):
    """The codec is primed with the recording's codes in pieces of the captured frame
    counts (set by hand on the CPU) and a remainder; its audio then continues the
    recording exactly as an offline decode of both cut at the recording's end."""
    engine = await make_base_engine(max_batch=2, first_chunk_frames=2, chunk_frames=4)
    engine.codec_worker.frame_buckets = (2, 4)
    decoded = record_codec_calls(engine)
    cloned = reference_cloned_voice(tiny_base, 1.0, TRANSCRIPT)  # 13 frames
    stream = engine.submit(
        clone_request(cloned, params=dataclasses.replace(GREEDY, max_frames=10, min_frames=10))
    )
    chunks, pcm = await collect(stream)
    # 13 reference frames, then the chunk ramp's 2 + 2 + 4 + 2 generated
    assert decoded == [4, 4, 4, 1, 2, 2, 4, 2]
    assert [c.frames for c in chunks] == [2, 2, 4, 2]
    decoder = load_speech_tokenizer(tiny_base / "speech_tokenizer")
    together = np.concatenate([cloned.ref_codes, codes_of(stream)])
    offline = decoder.decode(torch.from_numpy(together)[None])[0].numpy()
    np.testing.assert_allclose(pcm, offline[len(cloned.ref_codes) * 1920 :], atol=1e-5)


async def test_a_batch_mixing_in_context_and_x_vector_voices_gives_each_its_own_audio(
    make_base_engine, tiny_base
):
    """Each voice alone first, then all together in one batch: the same codes and
    audio (the in-context stream's codec priming does not touch its neighbours)."""
    engine = await make_base_engine(max_batch=4)
    in_context = reference_cloned_voice(tiny_base, 1.0, TRANSCRIPT, seed=1)
    x_vector = reference_cloned_voice(tiny_base, 1.0, None, seed=2)
    longer = reference_cloned_voice(tiny_base, 2.0, "Another, longer reference recording.", seed=3)
    voices = [in_context, x_vector, longer]
    sampled = SamplingParams(max_frames=9, min_frames=9, seed=5)
    alone = []
    for voice in voices:
        stream = engine.submit(clone_request(voice, params=sampled))
        alone.append((stream, (await collect(stream))[1]))
    together = [engine.submit(clone_request(voice, params=sampled)) for voice in voices]
    for (first, first_pcm), stream in zip(alone, together, strict=True):
        _, pcm = await collect(stream)
        assert stream.finish_reason == "length"
        np.testing.assert_array_equal(codes_of(stream), codes_of(first))
        np.testing.assert_allclose(pcm, first_pcm, atol=1e-5)


def _voice_with(cloned, **changes):
    return dataclasses.replace(cloned, **changes)


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        (lambda v: None, "voice", "speaks cloned voices only"),
        (
            lambda v: _voice_with(v, model="Qwen3-TTS-12Hz-1.7B-Base"),
            "cloned_voice",
            "was cloned for",
        ),
        (
            lambda v: _voice_with(v, speaker_embedding=np.zeros(32, np.float32)),
            "cloned_voice",
            "64 finite",
        ),
        (lambda v: _voice_with(v, ref_codes=v.ref_codes + 2048), "cloned_voice", r"\[0, 2048\)"),
        (lambda v: _voice_with(v, ref_codes=v.ref_codes[:, :8]), "cloned_voice", "frames >= 1, 16"),
        (lambda v: _voice_with(v, ref_text=""), "cloned_voice", "transcript"),
        (
            lambda v: _voice_with(v, ref_text="word " * 40),
            "cloned_voice",
            "more than anyone speaks",
        ),
    ],
)
async def test_a_voice_the_model_cannot_speak_is_refused_naming_the_field(
    make_base_engine, tiny_base, change, param, message
):
    engine = await make_base_engine(max_batch=2)
    cloned = change(reference_cloned_voice(tiny_base, 1.0, TRANSCRIPT))
    with pytest.raises(InvalidRequest, match=message) as refused:
        engine.submit(clone_request(cloned))
    assert refused.value.param == param
    assert engine.stats().queue_depth == 0


async def test_a_reference_too_long_for_a_prompt_is_refused_with_the_seconds_to_cut(
    make_base_engine, tiny_base
):
    engine = await make_base_engine(max_batch=2, max_len=64)  # prompts of 32 positions
    too_long = reference_cloned_voice(tiny_base, 2.0, TRANSCRIPT)  # 25 frames: 34 positions
    with pytest.raises(InvalidRequest, match="reference recording is too long") as refused:
        engine.submit(clone_request(too_long))
    assert refused.value.param == "cloned_voice"
    # The same voice without its recording (x-vector only) fits and speaks.
    x_vector = _voice_with(too_long, ref_codes=None, ref_text=None)
    stream = engine.submit(
        clone_request(x_vector, params=dataclasses.replace(GREEDY, max_frames=4, min_frames=4))
    )
    await collect(stream)
    assert stream.finish_reason == "length"


async def test_other_variants_refuse_cloned_voices_and_serve_on(make_engine, tiny_base):
    engine = await make_engine(max_batch=2)  # tiny CustomVoice
    assert not engine.info.supports_voice_clone
    cloned = reference_cloned_voice(tiny_base, 1.0, TRANSCRIPT)
    request = SynthesisRequest(text=TEXT, voice="ryan", cloned_voice=cloned, params=GREEDY)
    with pytest.raises(InvalidRequest, match="takes a Base model") as refused:
        engine.submit(request)
    assert refused.value.param == "cloned_voice"
    stream = engine.submit(dataclasses.replace(request, cloned_voice=None))
    await collect(stream)
    assert stream.finish_reason == "length" and len(codes_of(stream)) == FRAMES
