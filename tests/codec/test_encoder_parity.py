"""Our speech tokenizer encoder against qwen-tts 0.1.1's (transformers' Mimi encoder),
same random weights, float32: the codes must be exactly the reference's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ttsfleet_runtime.speech_tokenizer.rate12.encoder import load_codec_encoder


def _recording(samples: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 24000
    tone = np.sin(2 * np.pi * 180 * t) + 0.5 * np.sin(2 * np.pi * 410 * t + 1.0)
    return torch.from_numpy((0.3 * tone + 0.1 * rng.standard_normal(samples)).astype(np.float32))


@pytest.fixture(scope="module")
def tiny_encoder(tiny_tokenizer_dir):
    return load_codec_encoder(tiny_tokenizer_dir)


def _reference_codes(reference_tokenizer, audio: torch.Tensor) -> torch.Tensor:
    """What the reference's `speech_tokenizer.encode(audio, sr=24000)` returns: its
    feature extractor hands the samples over as they are, with an all-ones mask."""
    with torch.no_grad():
        (codes,) = reference_tokenizer.encode(
            audio[None], torch.ones(1, len(audio), dtype=torch.long), return_dict=False
        )
    return codes[0]


# Whole frames, a ragged tail (padding inside every strided conv), one frame, and a
# recording long enough that the transformer's causal attention spans 100 frames.
@pytest.mark.parametrize(
    ("samples", "seed"), [(1920 * 12, 1), (1920 * 7 + 333, 2), (1920, 3), (1920 * 50 + 1, 4)]
)
def test_codes_are_the_references(tiny_encoder, reference_tokenizer, samples, seed):
    audio = _recording(samples, seed)
    expected = _reference_codes(reference_tokenizer, audio)
    ours = tiny_encoder.encode(audio)
    assert ours.dtype == torch.int64
    assert ours.shape == expected.shape == (-(-samples // 1920), 16)
    assert torch.equal(ours, expected)


def test_codes_carry_the_recording(tiny_encoder):
    # Codes that ignored the audio (one code a group) would make the parity vacuous.
    codes = tiny_encoder.encode(_recording(1920 * 20, seed=5))
    assert ((codes >= 0) & (codes < 2048)).all()
    distinct_per_group = [len(set(codes[:, g].tolist())) for g in range(16)]
    assert sum(d > 1 for d in distinct_per_group) >= 12


def test_a_folder_without_encoder_tensors_is_refused(tmp_path, tiny_tokenizer_dir):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tiny_tokenizer_dir / "model.safetensors"))
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith("encoder.encoder_transformer")},
        str(tmp_path / "model.safetensors"),
    )
    (tmp_path / "config.json").write_text((tiny_tokenizer_dir / "config.json").read_text())
    with pytest.raises(ValueError, match="lacks .* encoder tensors"):
        load_codec_encoder(tmp_path)
