"""The random checkpoint tool writes the official layout, and the loader reads it."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from ttsfleet_runtime.checkpoint.sizes import SPECIAL_TOKENS, model_config
from ttsfleet_runtime.model.config import TTSConfig
from ttsfleet_runtime.model.tensor_layout import tensor_shapes
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer


def test_files_of_the_official_layout_are_written(tiny_custom_voice):
    for name in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "vocab.json",
        "merges.txt",
        "tokenizer_config.json",
        "speech_tokenizer/config.json",
        "speech_tokenizer/model.safetensors",
    ):
        assert (tiny_custom_voice / name).exists(), name
    generation = json.loads((tiny_custom_voice / "generation_config.json").read_text())
    assert generation["subtalker_top_k"] == 50 and generation["repetition_penalty"] == 1.05


def test_real_sizes_have_the_published_dimensions():
    big = TTSConfig.from_dict(model_config("1.7B", "CustomVoice"))
    small = TTSConfig.from_dict(model_config("0.6B", "CustomVoice"))
    assert (big.talker.hidden_size, big.talker.num_hidden_layers, big.talker.intermediate_size) == (
        2048,
        28,
        6144,
    )
    assert small.talker.hidden_size == 1024 and small.talker.code_predictor.hidden_size == 1024
    # The 1.7B predictor is narrower than its talker: a projection joins them.
    assert "talker.code_predictor.small_to_mtp_projection.weight" in tensor_shapes(big)
    assert "talker.code_predictor.small_to_mtp_projection.weight" not in tensor_shapes(small)
    params = sum(math.prod(s) for s in tensor_shapes(big).values())
    assert 1.8e9 < params < 2.0e9


def test_variants_differ_in_speakers_and_model_type():
    custom = model_config("tiny", "CustomVoice")
    design = model_config("tiny", "VoiceDesign")
    assert (
        custom["tts_model_type"] == "custom_voice" and "ryan" in custom["talker_config"]["spk_id"]
    )
    assert design["tts_model_type"] == "voice_design" and design["talker_config"]["spk_id"] == {}
    with pytest.raises(ValueError, match="unknown size"):
        model_config("7B", "CustomVoice")


def test_tokenizer_has_the_prompt_special_tokens_at_their_real_ids(tiny_custom_voice):
    tok = TextTokenizer.from_checkpoint(tiny_custom_voice)
    for token, token_id in SPECIAL_TOKENS.items():
        assert tok.token_id(token) == token_id
    ids = tok.encode("<|im_start|>assistant\nHello, 世界!<|im_end|>\n")
    assert (
        ids[0] == SPECIAL_TOKENS["<|im_start|>"] and len(tok.encode("<|im_start|>assistant\n")) == 3
    )
    assert tok.decode(ids) == "<|im_start|>assistant\nHello, 世界!<|im_end|>\n"


def test_same_seed_writes_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    a = write_random_checkpoint(
        tmp_path / "a", "tiny", "VoiceDesign", seed=5, with_speech_tokenizer=False
    )
    b = write_random_checkpoint(
        tmp_path / "b", "tiny", "VoiceDesign", seed=5, with_speech_tokenizer=False
    )
    ta, tb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert ta.keys() == tb.keys() and all((ta[k] == tb[k]).all() for k in ta)


def test_cli_writes_a_checkpoint(tmp_path):
    out = tmp_path / "ckpt"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ttsfleet_runtime.cli",
            "checkpoint",
            "--random",
            "--size",
            "tiny",
            "--variant",
            "VoiceDesign",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    assert json.loads((out / "config.json").read_text())["tts_model_type"] == "voice_design"


def test_random_weights_never_put_eos_among_the_codes_sampling_keeps(tiny_custom_voice):
    """Tests and benchmarks fix an utterance's length with --max-audio-seconds;
    a random EOS would end it early now and then (a flaky test, a short sample)."""
    from safetensors.torch import load_file

    config = json.loads((tiny_custom_voice / "config.json").read_text())["talker_config"]
    generation = json.loads((tiny_custom_voice / "generation_config.json").read_text())
    head = load_file(str(tiny_custom_voice / "model.safetensors"))["talker.codec_head.weight"]
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(4000, head.shape[1], generator=gen)  # RMS-normed states are ~N(0, 1)
    logits = hidden @ head.float().T
    kept = logits[:, :2048].topk(generation["top_k"]).values[:, -1]
    eos = logits[:, config["codec_eos_token_id"]]
    assert bool((eos < kept).all())
