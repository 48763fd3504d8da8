"""`TTSEngine.clone_voice` end to end on a tiny Base checkpoint: what qwen-tts 0.1.1's
`create_voice_clone_prompt` computes from the same recording (the official loader,
`from_pretrained`, on the same folder), and a clear refusal of what cannot be cloned."""

from __future__ import annotations

import inspect
import threading

import numpy as np
import pytest

from support import reference
from support.reference_model import reference_voice_cloner
from ttsfleet_runtime.engine.api import ClonedVoice, InvalidRequest
from ttsfleet_runtime.engine.resampling import resample
from ttsfleet_runtime.engine.tts_engine import TTSEngine

TRANSCRIPT = "The quick brown fox jumps over the lazy dog."


def _recording(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(140 + 30 * np.sin(2 * np.pi * 0.5 * t)) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6))
    return (0.3 * tone + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


@pytest.fixture(scope="module")
def engine(tiny_base):
    # Not started: clone_voice loads the encoders on first use (start() would preload them).
    return TTSEngine.from_pretrained(str(tiny_base), "cpu", dtype="float32")


@pytest.fixture(scope="module")
def official(tiny_base):
    return reference_voice_cloner(tiny_base)


def test_base_models_say_they_clone(engine):
    assert engine.info.variant == "Base" and engine.info.supports_voice_clone


def test_official_loader_finds_every_tensor(official, tiny_base):
    from safetensors.torch import load_file

    # from_pretrained only warns about missing weights: load strictly to be sure.
    official.model.load_state_dict(load_file(str(tiny_base / "model.safetensors")), strict=True)


def test_in_context_voice_is_the_references(engine, official):
    audio = _recording(1.7, 24000)
    (expected,) = official.create_voice_clone_prompt(ref_audio=(audio, 24000), ref_text=TRANSCRIPT)
    voice = engine.clone_voice(audio, 24000, TRANSCRIPT)
    assert voice.in_context and voice.ref_text == TRANSCRIPT
    assert voice.model == engine.info.name
    assert voice.ref_codes.dtype == np.int64 and voice.ref_codes.shape == (22, 16)
    np.testing.assert_array_equal(voice.ref_codes, expected.ref_code.numpy())
    assert voice.speaker_embedding.dtype == np.float32
    np.testing.assert_allclose(
        voice.speaker_embedding, expected.ref_spk_embedding.numpy(), rtol=1e-4, atol=1e-5
    )
    again = ClonedVoice.from_bytes(voice.to_bytes())
    np.testing.assert_array_equal(again.ref_codes, voice.ref_codes)


def test_without_a_transcript_only_the_embedding_is_computed(engine, official):
    audio = _recording(1.2, 24000, seed=1)
    (expected,) = official.create_voice_clone_prompt(
        ref_audio=(audio, 24000), x_vector_only_mode=True
    )
    voice = engine.clone_voice(audio, 24000, None)
    assert not voice.in_context and voice.ref_codes is None and voice.ref_text is None
    np.testing.assert_allclose(
        voice.speaker_embedding, expected.ref_spk_embedding.numpy(), rtol=1e-4, atol=1e-5
    )


def test_other_rates_are_resampled_as_the_reference_resamples(engine):
    # The reference resamples with librosa.resample, whose default is libsoxr "HQ"
    # (calling librosa itself here would cost a 10 s JIT compile).
    librosa = reference.require("librosa")
    assert inspect.signature(librosa.resample).parameters["res_type"].default == "soxr_hq"
    soxr = reference.require("soxr")
    audio = _recording(1.5, 44100, seed=2)
    at_24k = soxr.resample(audio, 44100, 24000, quality="soxr_hq").astype(np.float32)
    np.testing.assert_array_equal(resample(audio, 44100, 24000), at_24k)
    voice = engine.clone_voice(audio, 44100, TRANSCRIPT)
    direct = engine.clone_voice(at_24k, 24000, TRANSCRIPT)
    np.testing.assert_array_equal(voice.ref_codes, direct.ref_codes)
    np.testing.assert_array_equal(voice.speaker_embedding, direct.speaker_embedding)


def test_concurrent_clones_give_what_one_at_a_time_gives(engine):
    recordings = [_recording(1.0, 24000, seed=s) for s in range(4)]
    alone = [engine.clone_voice(r, 24000, TRANSCRIPT) for r in recordings]
    together: list[ClonedVoice | None] = [None] * len(recordings)

    def clone(i):
        together[i] = engine.clone_voice(recordings[i], 24000, TRANSCRIPT)

    threads = [threading.Thread(target=clone, args=(i,)) for i in range(len(recordings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_array_equal(a.ref_codes, b.ref_codes)
        np.testing.assert_array_equal(a.speaker_embedding, b.speaker_embedding)


@pytest.mark.parametrize(
    ("audio", "rate", "transcript", "param", "reason"),
    [
        (np.zeros(24000, np.float32), 24000, None, "audio", "silent"),
        (np.full(24000, np.nan, np.float32), 24000, None, "audio", "non-finite"),
        (_recording(0.05, 24000), 24000, None, "audio", "must last"),
        (np.zeros((2, 24000), np.float32) + 0.1, 24000, None, "audio", "mono"),
        (_recording(1.0, 24000), 4000, None, "sample_rate", "not supported"),
        (_recording(1.0, 24000), 24000, "  ", "transcript", "transcript is empty"),
    ],
)
def test_unusable_recordings_are_refused(engine, audio, rate, transcript, param, reason):
    with pytest.raises(InvalidRequest, match=reason) as refused:
        engine.clone_voice(audio, rate, transcript)
    assert refused.value.param == param


def test_models_without_cloning_refuse(tiny_custom_voice):
    engine = TTSEngine.from_pretrained(str(tiny_custom_voice), "cpu", dtype="float32")
    assert not engine.info.supports_voice_clone
    with pytest.raises(InvalidRequest, match="only Base models clone"):
        engine.clone_voice(_recording(1.0, 24000), 24000, TRANSCRIPT)
