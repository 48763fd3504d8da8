"""The GPU kernel path computes what the eager path computes: with every fused
kernel bound (run here in Triton's interpreter), the engine's runner generates
the same codes as eager torch on the tiny checkpoint, greedy and seeded."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from support.greedy import GREEDY, our_codes
from ttsfleet_runtime.kernels import linear as kernel_linear
from ttsfleet_runtime.kernels.linear_table import LinearConfig
from ttsfleet_runtime.model import ops as talker_ops

TEXT = "Kernels must not change a single code."
FRAMES = 4
SEEDED = dataclasses.replace(
    GREEDY, temperature=0.9, top_k=50, top_p=0.95, subtalker_temperature=0.9, seed=7
)


@pytest.fixture
def interpreter_sized(monkeypatch):
    # The interpreter runs a grid's programs one by one: the H100's narrow GEMV blocks
    # would make thousands of them here. One wide block per product keeps the same kernel
    # (and every fused flag) at a few programs a call.
    wide = LinearConfig("gemv", 1, 1024, 64)
    monkeypatch.setattr(kernel_linear, "config_for", lambda m, n, k, fp8=False: wide)


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_the_kernel_path_generates_the_eager_codes(tiny_custom_voice, params, interpreter_sized):
    eager = our_codes(tiny_custom_voice, TEXT, "ryan", None, "english", FRAMES, params)
    fused = our_codes(
        tiny_custom_voice, TEXT, "ryan", None, "english", FRAMES, params, ops=talker_ops.fused()
    )
    assert fused.shape == eager.shape
    assert torch.equal(fused, eager)
