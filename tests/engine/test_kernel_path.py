"""The GPU kernel path computes what the eager path computes: with every fused
kernel bound (run here in Triton's interpreter), the engine's runner generates
the same codes as eager torch on the tiny checkpoint, greedy and seeded."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from support.greedy import GREEDY, our_codes
from ttsfleet_runtime.engine import fusion

TEXT = "Kernels must not change a single code."
SEEDED = dataclasses.replace(
    GREEDY, temperature=0.9, top_k=50, top_p=0.95, subtalker_temperature=0.9, seed=7
)


@pytest.fixture
def kernels_bound():
    fusion.enable(compile_helpers=False)
    try:
        yield
    finally:
        fusion.use_eager()


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_the_kernel_path_generates_the_eager_codes(tiny_custom_voice, params, request):
    eager = our_codes(tiny_custom_voice, TEXT, "ryan", None, "english", 6, params)
    request.getfixturevalue("kernels_bound")
    fused = our_codes(tiny_custom_voice, TEXT, "ryan", None, "english", 6, params)
    assert fused.shape == eager.shape
    assert torch.equal(fused, eager)
