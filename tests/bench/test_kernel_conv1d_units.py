"""bench/kernel_conv1d.py --units on the CPU (Triton's interpreter): its arguments, its
candidate configs and its correctness check of the fused residual unit against the two
calls, on a small unit (the timings need the GPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ttsfleet_runtime.kernels.conv1d import ConvConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    """The script as a module (registered while the tests run: its dataclasses need it)."""
    spec = importlib.util.spec_from_file_location("kernel_conv1d", ROOT / "bench/kernel_conv1d.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_units_flag_selects_the_residual_unit_section(bench, tmp_path):
    args = bench.parse_args(["--units", "--out", str(tmp_path), "--batch", "4"])
    assert args.units and args.batch == 4 and args.frames == 8
    assert not bench.parse_args(["--out", str(tmp_path)]).units


def test_unit_candidates_fit_each_width(bench):
    for unit in bench.UNITS:
        configs = bench.unit_candidates(unit)
        width = 1 << (unit.channels - 1).bit_length()
        assert len(configs) >= 10
        assert all(c.block_n <= width and c.block_k <= width for c in configs)
    assert {u.channels for u in bench.UNITS} == {96, 192}


def test_correctness_check_passes_the_fused_unit(bench, monkeypatch):
    small = ConvConfig(16, 16, 16, num_warps=4, num_stages=1)
    unit = bench.Unit("test unit (24)", 24, 9)
    data = bench.unit_inputs(unit, 2, 2, dilation=3, device="cpu")
    errors = bench.unit_errors(data, small)
    assert errors["correct"], errors
    assert errors["act_differing"] <= 0.01


def test_table_text_lists_the_best_config_per_width(bench):
    row = {
        "unit": {"name": "block4 residual unit (96)", "channels": 96},
        "best": {
            "config": dict(block_t=128, block_n=64, block_k=64, num_warps=8, num_stages=3),
            "ms": 0.5,
        },
        "two_calls_raw_act": {"ms": 0.9},
    }
    text = bench.unit_table_text([row, {"unit": {"name": "x", "channels": 192}}], "H100")
    assert (
        "    96: (128, 64, 64, 8, 3),  # block4 residual unit (96): 500 us (two calls 900)" in text
    )
    compile(text, "table", "exec")
