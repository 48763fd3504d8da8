"""Cloning a voice for a 25 Hz Base model computes what qwen-tts' 25 Hz tokenizer computes,
on the same random weights, float32 CPU: the reference codes exactly, the decoder's
x-vector and reference mel to float rounding, and the loudness normalisation of
`sox norm -6` (the reference runs the sox binary) without running SoX.

The reference's CPU float32 attention lets a recording's last, shorter encoder window
attend to zero padding when the recording spans several windows (its mask is a bool
tensor added to the scores, so nothing is masked); its flash-attention path, which it
takes in half precision on a GPU, does not. We compute the latter, so codes are compared
on recordings whose windows (2 s each) are all full, or that fit in one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from support.reference_25hz import reference_speech_tokenizer_25hz
from ttsfleet_runtime.engine.api import ClonedVoice
from ttsfleet_runtime.engine.voice_encoders import VoiceEncoders
from ttsfleet_runtime.speech_tokenizer.rate25.encoder import (
    DecoderVoiceExtractor,
    kaldi_fbank,
    load_speech_encoder_25hz,
    peak_normalised,
)

# Max abs differences seen on these inputs: x-vector 2e-7, reference mel 1e-6 (log),
# fbank 2e-4 (log energies, float32 FFTs of different libraries), sox 6e-8.
XVECTOR_TOL, MEL_TOL, FBANK_TOL, SOX_TOL = 1e-5, 1e-4, 2e-3, 1e-6


def _recording(samples: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 16000
    voiced = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t))
    return (voiced + (rng.random(samples) - 0.5) * 0.2).astype(np.float32)


@pytest.mark.parametrize("samples", [20_800, 31_700, 64_000, 96_000])
def test_reference_codes_are_the_reference_tokenizers(tiny_25hz_base, samples):
    folder = tiny_25hz_base / "speech_tokenizer"
    reference = reference_speech_tokenizer_25hz(folder)
    audio = _recording(samples)
    (expected,), (length,) = reference.encoder.quantize_speech([torch.from_numpy(audio)])
    codes = load_speech_encoder_25hz(folder).encode(torch.from_numpy(audio))
    assert codes.shape == (length,) == (-(-samples // 640),)
    assert torch.equal(codes, expected[:length])
    assert len(set(codes.tolist())) > 3  # the weights make varied codes


@pytest.mark.parametrize("samples", [8_000, 50_000])
def test_decoder_voice_is_the_reference_extractors(tiny_25hz_base, samples):
    folder = tiny_25hz_base / "speech_tokenizer"
    extractor = reference_speech_tokenizer_25hz(folder).encoder_xvector_extractor
    audio = _recording(samples, seed=1)
    expected_xvector, expected_mel = extractor.extract_code(audio)
    xvector, ref_mel = DecoderVoiceExtractor(folder / "campplus.onnx").extract(audio)
    assert xvector.shape == (192,) and ref_mel.shape == expected_mel.shape
    np.testing.assert_allclose(xvector, expected_xvector, atol=XVECTOR_TOL, rtol=0)
    np.testing.assert_allclose(ref_mel, expected_mel, atol=MEL_TOL, rtol=0)
    np.testing.assert_allclose(peak_normalised(audio), extractor.sox_norm(audio), atol=SOX_TOL)


def test_fbank_is_kaldis():
    from support.kaldi_stand_in import _kaldi_fbank

    audio = torch.from_numpy(peak_normalised(_recording(12_345, seed=2)))
    expected = _kaldi_fbank(audio, num_mel_bins=80, dither=0.0, sample_frequency=16000)
    torch.testing.assert_close(kaldi_fbank(audio), expected, atol=FBANK_TOL, rtol=0)


@pytest.mark.parametrize("transcript", [None, "A short reference."])
def test_cloning_a_25hz_voice_keeps_the_decoder_conditioning(tiny_25hz_base, transcript):
    """VoiceEncoders picks the 25 Hz encoder from the folder; the voice it returns
    survives the voice store's npz."""
    encoders = VoiceEncoders(tiny_25hz_base, "cpu")
    audio_24k = np.repeat(_recording(32_000, seed=3), 3)[::2]  # 2 s at 24 kHz
    voice = encoders.clone(audio_24k, 24000, transcript, model="tiny-25hz")
    assert voice.xvector.shape == (192,) and voice.ref_mel.shape[1] == 80
    assert abs(voice.ref_mel.shape[0] - 200) <= 1
    if transcript is None:
        assert voice.ref_codes is None
    else:
        assert voice.ref_codes.shape == (50,) and voice.ref_codes.dtype == np.int64
    again = ClonedVoice.from_bytes(voice.to_bytes())
    np.testing.assert_array_equal(again.xvector, voice.xvector)
    np.testing.assert_array_equal(again.ref_mel, voice.ref_mel)
    assert again.ref_text == transcript


def test_12hz_voices_load_without_decoder_conditioning():
    voice = ClonedVoice(speaker_embedding=np.ones(8, np.float32), model="m")
    again = ClonedVoice.from_bytes(voice.to_bytes())
    assert again.xvector is None and again.ref_mel is None
