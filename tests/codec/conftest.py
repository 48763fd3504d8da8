"""Fixtures for the codec tests: a tiny random speech tokenizer folder, our decoder loaded
from it, and the official reference model (`qwen-tts`) loaded from the same folder."""

from __future__ import annotations

import importlib
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from support import reference
from ttsfleet_runtime.checkpoint.speech_tokenizer_files import write_random_speech_tokenizer
from ttsfleet_runtime.codec import load_speech_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("speech_tokenizer")
    return write_random_speech_tokenizer(folder, "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_decoder(tiny_tokenizer_dir):
    return load_speech_tokenizer(tiny_tokenizer_dir, device="cpu", dtype=torch.float32)


def _random_codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (batch, frames, 16), generator=gen)


@pytest.fixture
def random_codes():
    """random_codes(batch, frames, seed) -> int64 codes [batch, frames, 16]."""
    return _random_codes


def _reference_tokenizer_modules():
    """The reference 12 Hz tokenizer modules from the installed `qwen-tts` package.

    Imported as a stand-alone package so that `qwen_tts/__init__` (which pulls in
    librosa, sox and the whole inference stack) never runs; the two files themselves
    need only torch and transformers.
    """
    origin = reference.reference_origin()
    reference.require("transformers")
    name = "_qwen_tts_tokenizer_12hz_reference"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(origin).parent / "core" / "tokenizer_12hz")]
        sys.modules[name] = package
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if "default" not in ROPE_INIT_FUNCTIONS:  # transformers 5 dropped it (qwen-tts-hf shim)
        importlib.import_module("qwen_tts._transformers_compat").patch_transformers_rope_registry()
    config = importlib.import_module(f"{name}.configuration_qwen3_tts_tokenizer_v2")
    modeling = importlib.import_module(f"{name}.modeling_qwen3_tts_tokenizer_v2")
    return config, modeling


@pytest.fixture(scope="session")
def build_reference_tokenizer():
    """build(config.json as a dict) -> the reference Qwen3TTSTokenizerV2Model (random init;
    under `torch.device("meta")` it costs no memory)."""
    config_module, modeling = _reference_tokenizer_modules()

    def build(raw: dict):
        cfg = config_module.Qwen3TTSTokenizerV2Config(
            **{k: v for k, v in raw.items() if k not in ("architectures", "model_type")}
        )
        for sub in (cfg, cfg.encoder_config, cfg.decoder_config):
            sub._attn_implementation = "eager"
        return modeling.Qwen3TTSTokenizerV2Model(cfg)

    return build


@pytest.fixture(scope="session")
def reference_tokenizer(tiny_tokenizer_dir, build_reference_tokenizer):
    """The reference model holding the tiny folder's weights (strict load)."""
    from safetensors.torch import load_file

    model = build_reference_tokenizer(json.loads((tiny_tokenizer_dir / "config.json").read_text()))
    model.load_state_dict(load_file(str(tiny_tokenizer_dir / "model.safetensors")), strict=True)
    return model.float().eval()
