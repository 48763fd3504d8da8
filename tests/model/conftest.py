"""Tiny random checkpoints in the official layout, one per variant, written once
(CustomVoice: `tiny_custom_voice` in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

# Tiny models on a shared 2-core machine: more than one intra-op thread makes
# every small matmul wait on busy cores (10x slower steps).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_voice_design(tmp_path_factory) -> Path:
    # With its speech tokenizer, though these tests stop at codes: the model runner
    # reads the frame rate (its KV sizing) from it, as from any checkpoint it serves.
    return write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-vd"), "tiny", "VoiceDesign", seed=1
    )
