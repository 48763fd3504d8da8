"""The speaker encoder of Base checkpoints against qwen-tts 0.1.1's
`extract_speaker_embedding`, on the same random weights (float32, CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from support import reference
from support.reference_model import reference_model, reference_modeling
from ttsfleet_runtime.checkpoint.sizes import model_config
from ttsfleet_runtime.model.config import TTSConfig
from ttsfleet_runtime.model.speaker_encoder import (
    load_speaker_encoder,
    log_mel,
    mel_filterbank,
    speaker_encoder_shapes,
)
from ttsfleet_runtime.model.tensor_layout import tensor_shapes


def _voice(seconds: float, seed: int, rate: int = 24000) -> np.ndarray:
    """A voiced-sounding recording: a gliding harmonic tone in noise, within [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = 120 + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6))
    return (0.3 * tone + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def test_filterbank_is_librosas_slaney_mel():
    librosa = reference.require("librosa")
    expected = librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)
    ours = mel_filterbank(24000, 1024, 128, 0.0, 12000.0)
    assert ours.dtype == expected.dtype == np.float32
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-9)


def test_log_mel_is_the_references():
    modeling = reference_modeling()
    audio = _voice(1.3, seed=1)
    expected = modeling.mel_spectrogram(
        torch.from_numpy(audio)[None],
        n_fft=1024,
        num_mels=128,
        sampling_rate=24000,
        hop_size=256,
        win_size=1024,
        fmin=0,
        fmax=12000,
    ).transpose(1, 2)[0]
    ours = log_mel(torch.from_numpy(audio), 24000)
    assert ours.shape == expected.shape == (len(audio) // 256, 128)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("seconds", "seed"), [(0.4, 2), (2.7, 3)])
def test_embedding_matches_the_references(tiny_base, seconds, seed):
    ref = reference_model(tiny_base)  # a strict load: every speaker_encoder tensor is there
    audio = _voice(seconds, seed)
    expected = ref.extract_speaker_embedding(audio, 24000)
    ours = load_speaker_encoder(tiny_base).embed(torch.from_numpy(audio))
    config = json.loads((tiny_base / "config.json").read_text())
    assert ours.shape == expected.shape == (config["talker_config"]["hidden_size"],)
    # Weights that shrink the embedding to nothing would prove nothing.
    assert expected.std() > 0.1
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)


def test_other_recordings_give_other_embeddings(tiny_base):
    encoder = load_speaker_encoder(tiny_base)
    a = encoder.embed(torch.from_numpy(_voice(1.0, seed=4)))
    b = encoder.embed(torch.from_numpy(2.0 * _voice(1.0, seed=5)[::-1].copy() / 3))
    assert (a - b).abs().max() > 1e-2


@pytest.mark.parametrize("size", ["0.6B", "1.7B"])
def test_real_size_base_layout_is_the_references(size):
    """Names and shapes of every tensor a real-size Base checkpoint holds, against the
    official model built on the meta device (nothing allocated, nothing run)."""
    modeling = reference_modeling()
    raw = model_config(size, "Base")
    cfg = modeling.Qwen3TTSConfig(**raw)
    for c in (cfg, cfg.talker_config, cfg.talker_config.code_predictor_config):
        c._attn_implementation = "eager"
    with torch.device("meta"):
        model = modeling.Qwen3TTSForConditionalGeneration(cfg)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    parsed = TTSConfig.from_dict(raw)
    assert {**tensor_shapes(parsed), **speaker_encoder_shapes(parsed)} == expected
    assert raw["speaker_encoder_config"]["enc_dim"] == raw["talker_config"]["hidden_size"]


def test_only_base_checkpoints_have_a_speaker_encoder(tiny_custom_voice):
    assert speaker_encoder_shapes(TTSConfig.from_file(tiny_custom_voice / "config.json")) == {}
    with pytest.raises(ValueError, match="only Base"):
        load_speaker_encoder(tiny_custom_voice)
