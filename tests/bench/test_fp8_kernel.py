"""bench/fp8_kernel.py end to end on the CPU (tiny checkpoint, Triton's interpreter, eager
steps): the JSON the lead's H200 run writes, every way of every timed product present and
each within its own rounding of the product it stands for."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_products_sweep_and_steps_on_a_tiny_checkpoint(tmp_path, tiny_custom_voice):
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fp8_kernel.py"), "--device", "cpu"]
        + ["--sizes", "tiny", "--model", str(tiny_custom_voice), "--out", str(tmp_path)]
        + ["--matrices", "predictor.down", "--ms", "1,3", "--batches", "1"]
        + ["--sweep", "--sweep-ms", "1", "--calls", "1", "--replays", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "fp8_kernel.json").read_text())
    assert out["env"]["torch"] and out["env"]["date"] and "git" in out["env"]
    assert "errors" not in out, out.get("tracebacks")
    rows = out["products"]
    assert [(r["matrix"], r["m"]) for r in rows] == [("predictor.down", 1), ("predictor.down", 3)]
    for row in rows:
        assert row["fp8_kernel"]["rel_error"] < 1e-5  # float32 on the CPU: exact products
        assert row["bf16"]["rel_error"] < 1e-5
        # _scaled_mm also rounds the input to e4m3: error of its own, a few percent.
        assert 1e-4 < row["fp8_scaled_mm"]["rel_error"] < 0.1
        assert row["fp8_kernel"]["us"] > 0
    (best,) = out["sweep"].values()
    assert best["config"][0] == "gemv" and best["matrix"] == "predictor.down"
    assert "FP8_TABLE = {" in (tmp_path / "fp8_table.py").read_text()
    assert set(out["step_ms"]) == {"bf16_B1", "fp8_B1"} and out["step_how"] == "eager step"
    with gzip.open(tmp_path / "fp8_kernel_samples.json.gz", "rt") as f:
        raw = json.load(f)
    assert len(raw["products"]) == 6 and len(raw["step_ms"]["fp8_B1"]) >= 1
