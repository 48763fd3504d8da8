"""bench/window_attention.py on the CPU: its smoke run (Triton's interpreter, tiny shapes)
checks and times every variant; without a GPU anything else is refused with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "window_attention.py"


def run(args, **env):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | env,
    )


def test_smoke_run_checks_and_times_every_variant(tmp_path):
    result = run(["--smoke", "--out", str(tmp_path), "--batches", "2"], TRITON_INTERPRET="1")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "window_attention.json").read_text())
    assert report["errors"] == []
    assert [(c["batch"], c["frames"]) for c in report["cases"]] == [(2, 1), (2, 8)]
    for case in report["cases"]:
        assert case["check"]["ok"] and case["check"]["ring_state_equal"]
        assert set(case["variants"]) == {"ring", "old", "old_attention", "torch_ring"}
        assert all(len(v["samples_ms"]) == 2 for v in case["variants"].values())
    assert "B=2 n=8" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines with no GPU")
def test_without_a_gpu_only_the_smoke_run_is_accepted(tmp_path):
    result = run(["--out", str(tmp_path)])
    assert result.returncode == 2
    assert "needs a CUDA GPU" in result.stderr and "--smoke" in result.stderr
    assert not (tmp_path / "window_attention.json").exists()
