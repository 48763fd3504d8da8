"""A tiny random CustomVoice checkpoint and engines over it (CPU, float32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint
from ttsfleet_runtime.engine.tts_engine import TTSEngine

# Tiny models on a shared 2-core machine: more than one intra-op thread makes
# every small matmul wait on busy cores (10x slower steps).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-engine"), "tiny", "CustomVoice", seed=3
    )


@pytest.fixture
async def make_engine(tiny_checkpoint):
    """make_engine(**kwargs) -> a started TTSEngine on the tiny CustomVoice checkpoint
    (or on `checkpoint=`); all are stopped after the test."""
    engines: list[TTSEngine] = []

    async def make(checkpoint: Path | None = None, **kwargs) -> TTSEngine:
        kwargs.setdefault("dtype", "float32")
        kwargs.setdefault("keep_codes", True)  # the tests compare the codes generated
        engine = TTSEngine.from_pretrained(str(checkpoint or tiny_checkpoint), "cpu", **kwargs)
        await engine.start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.stop(drain_timeout_s=0)
