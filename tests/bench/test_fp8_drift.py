"""bench/fp8_drift.py end to end on the CPU (tiny model, fp8 in torch, eager steps): the
JSON of the lead's H200 run, with every section filled and the raw samples beside it."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bf16_and_fp8_side_by_side_on_a_tiny_checkpoint(tmp_path, tiny_custom_voice):
    frames, seeds = 3, 2
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fp8_drift.py"), "--device", "cpu"]
        + ["--sizes", "tiny", "--model", str(tiny_custom_voice), "--out", str(tmp_path)]
        + ["--frames", str(frames), "--seeds", str(seeds), "--batches", "1", "--replays", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "fp8_drift.json").read_text())
    assert out["env"]["torch"] and out["env"]["date"] and "commit" in out["env"]["git"]
    size = out["sizes"]["tiny"]
    assert "error" not in size, size.get("traceback")
    bf16, fp8 = size["weight_bytes"]["bf16"], size["weight_bytes"]["fp8"]
    # float32 on the CPU: a byte an element instead of four, plus a float32 scale a row.
    assert fp8["decoder_matrices"] < bf16["decoder_matrices"] / 3
    assert fp8["other"] == bf16["other"]
    forced = size["teacher_forced"]
    assert forced["frames"] == frames * seeds
    assert 0 <= forced["talker_kl_nats"]["mean"] <= forced["talker_kl_nats"]["max"]
    assert 0 <= forced["predictor_top1_agreement"] <= 1
    assert len(forced["predictor_top1_agreement_by_group"]) == 15
    for mode in ("sampled", "greedy"):
        run = size["free_run"][mode]
        assert len(run["first_difference_frames"]) == seeds
        assert all(f is None or 0 <= f < frames for f in run["first_difference_frames"])
    snr = size["waveform_snr_db"]
    assert not math.isnan(snr["teacher_forced_top1_fp8_vs_bf16"])
    assert set(size["step_ms"]) == {"bf16_B1", "fp8_B1"} and size["step_how"] == "eager step"
    with gzip.open(tmp_path / "fp8_drift_samples.json.gz", "rt") as f:
        raw = json.load(f)["sizes"]["tiny"]
    assert len(raw["teacher_forced"]["talker_kl"]) == frames * seeds
    assert len(raw["free_run_codes"]["sampled/fp8"]) == seeds
    assert len(raw["step_ms"]["fp8_B1"]) >= 1
