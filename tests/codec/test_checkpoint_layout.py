"""The folder the random writer produces has the official layout and loads back."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from ttsfleet_runtime.checkpoint.codec_encoder_layout import encoder_tensor_shapes
from ttsfleet_runtime.checkpoint.speech_tokenizer_files import (
    decoder_tensor_shapes,
    write_random_speech_tokenizer,
)
from ttsfleet_runtime.speech_tokenizer.rate12 import load_speech_tokenizer
from ttsfleet_runtime.speech_tokenizer.rate12.config import (
    SpeechTokenizerConfig,
    speech_tokenizer_config,
)


@pytest.mark.parametrize("size", ["tiny", "real"])
def test_writer_tensor_set_is_the_reference_models_state_dict(size, build_reference_tokenizer):
    """Names and shapes of everything written, checked against the official model built
    (on the meta device) from the same config.json."""
    raw = speech_tokenizer_config(size).to_dict()
    with torch.device("meta"):
        reference = build_reference_tokenizer(raw)
    expected = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    ours = {
        **encoder_tensor_shapes(raw["encoder_config"]),
        **decoder_tensor_shapes(speech_tokenizer_config(size)),
    }
    assert ours == expected


def test_folder_has_the_official_files(tiny_tokenizer_dir):
    assert sorted(p.name for p in tiny_tokenizer_dir.iterdir()) == [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
    ]
    raw = json.loads((tiny_tokenizer_dir / "config.json").read_text())
    assert raw["model_type"] == "qwen3_tts_tokenizer_12hz"
    assert raw["decode_upsample_rate"] == 1920
    assert SpeechTokenizerConfig.from_dict(raw) == speech_tokenizer_config("tiny")
    with safe_open(str(tiny_tokenizer_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert any(n.startswith("encoder.") for n in names)
    assert any(n.startswith("decoder.") for n in names)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path, tiny_tokenizer_dir):
    again = write_random_speech_tokenizer(tmp_path / "again", "tiny", seed=0)
    other = write_random_speech_tokenizer(tmp_path / "other", "tiny", seed=1)
    name = "decoder.pre_conv.conv.weight"

    def tensor(folder):
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            return f.get_tensor(name)

    assert torch.equal(tensor(again), tensor(tiny_tokenizer_dir))
    assert not torch.equal(tensor(other), tensor(tiny_tokenizer_dir))


def test_loader_reads_decoder_weights_and_ignores_the_encoder(tiny_tokenizer_dir):
    decoder = load_speech_tokenizer(tiny_tokenizer_dir, device="cpu", dtype=torch.bfloat16)
    with safe_open(str(tiny_tokenizer_dir / "model.safetensors"), "pt") as f:
        written = f.get_tensor("decoder.decoder.1.block.1.conv.weight")
    assert decoder.decoder[1].block[1].conv.weight.dtype == torch.bfloat16
    torch.testing.assert_close(
        decoder.decoder[1].block[1].conv.weight.float(), written, atol=1e-2, rtol=1e-2
    )
    # RoPE frequencies are not weights: they stay float32 whatever the model dtype.
    assert decoder.pre_transformer.inv_freq.dtype == torch.float32
    assert not any(p.requires_grad for p in decoder.parameters())


def test_a_folder_without_weights_is_refused(tmp_path, tiny_tokenizer_dir):
    (tmp_path / "config.json").write_text((tiny_tokenizer_dir / "config.json").read_text())
    with pytest.raises(FileNotFoundError):
        load_speech_tokenizer(tmp_path)


def test_unknown_size_is_refused(tmp_path):
    with pytest.raises(ValueError, match="tiny"):
        write_random_speech_tokenizer(tmp_path, "huge")
