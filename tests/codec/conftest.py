"""Fixtures for the codec tests: a tiny random speech tokenizer folder, our decoder loaded
from it, and the official reference model (`qwen-tts`) loaded from the same folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from support.reference_model import build_reference_speech_tokenizer, reference_speech_tokenizer
from ttsfleet_runtime.checkpoint.speech_tokenizer_files import write_random_speech_tokenizer
from ttsfleet_runtime.speech_tokenizer.rate12 import convs, load_speech_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("speech_tokenizer")
    return write_random_speech_tokenizer(folder, "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_decoder(tiny_tokenizer_dir):
    return load_speech_tokenizer(tiny_tokenizer_dir, device="cpu", dtype=torch.float32)


@pytest.fixture
def decoder_on(tiny_tokenizer_dir):
    """decoder_on(route, attention=None) -> the tiny decoder (same weights as
    `tiny_decoder`) made with its convolutions on `route` (a name of convs.ROUTES or a
    ConvRoute) and its attention forced as `attention` says."""

    def make(route: str | convs.ConvRoute, attention: str | None = None):
        if isinstance(route, str):
            route = convs.ROUTES[route]
        return load_speech_tokenizer(
            tiny_tokenizer_dir, device="cpu", dtype=torch.float32, route=route, attention=attention
        )

    return make


def _random_codes(batch: int, frames: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (batch, frames, 16), generator=gen)


@pytest.fixture
def random_codes():
    """random_codes(batch, frames, seed) -> int64 codes [batch, frames, 16]."""
    return _random_codes


@pytest.fixture(scope="session")
def build_reference_tokenizer():
    """build(config.json as a dict) -> the reference Qwen3TTSTokenizerV2Model (random init;
    under `torch.device("meta")` it costs no memory)."""
    return build_reference_speech_tokenizer


@pytest.fixture(scope="session")
def reference_tokenizer(tiny_tokenizer_dir):
    """The reference model holding the tiny folder's weights (strict load)."""
    return reference_speech_tokenizer(tiny_tokenizer_dir)
