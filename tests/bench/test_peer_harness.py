"""bench/peers/bench_faster_qwen3_tts.py on a machine without the peer or a GPU: its
options parse, and it still writes its JSON (environment, options, why it could not
run) and fails, so a device run that cannot measure says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "peers" / "bench_faster_qwen3_tts.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_the_options_of_the_documented_command_parse():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--out", "--sizes", "--frames", "--batches", "--budget-s"):
        assert flag in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_without_a_gpu_it_writes_why_and_fails(tmp_path):
    result = run("--out", str(tmp_path), "--sizes", "1.7B,0.6B", "--frames", "3")
    assert result.returncode == 1
    out = json.loads((tmp_path / "faster_qwen3_tts.json").read_text())
    assert out["config"]["frames"] == 3 and out["config"]["sizes"] == "1.7B,0.6B"
    assert out["env"]["torch"] and "faster-qwen3-tts" in out["env"]
    assert "CUDA" in out["error"]
