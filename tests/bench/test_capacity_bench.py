"""`ttsfleet-runtime bench capacity` on the CPU with a tiny checkpoint: a real `serve`
process, the load test climbing two arrival rates against it over HTTP, and a report
with the rates, the load figures summary.json copies and the raw load test beside it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_rates_are_climbed_against_a_served_checkpoint_and_reported(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", "capacity", "--out", str(out)]
        + ["--sizes", "tiny", "--device", "cpu", "--rates", "1,2", "--duration-s", "3"]
        + ["--no-burst", "--max-batch", "4", "--ckpt-dir", str(tmp_path / "ckpt")]
        + ["--port", "8933", "--budget-s", "500"],
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "capacity.json").read_text())
    assert report["benchmark"] == "capacity" and report["args"]["rates"] == [1.0, 2.0]
    tiny = report["sizes"]["tiny"]
    assert "errors" not in tiny
    rates = tiny["rates"]["rates"]
    assert [r["rate_rps"] for r in rates] == [1.0, 2.0]
    assert all(r["requests"] >= 1 for r in rates)
    # The four figures summary.json keeps, measured or not on this grid.
    assert set(tiny["load"]) == {
        "ttfa_p95_ms_at_10_rps",
        "ttfa_p95_ms_at_20_rps",
        "knee_rps",
        "max_concurrent_streams",
    }
    raw = json.loads((out / "tiny" / "loadtest.json").read_text())
    assert [r["rate_rps"] for r in raw["rates"]] == [1.0, 2.0]
