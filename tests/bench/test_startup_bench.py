"""`ttsfleet-runtime bench startup` on the CPU with a tiny checkpoint: two real `serve` processes (an
empty compile cache, then the same one), each timed from spawn to /health/ready, with
the server's own start-up phases scraped from /metrics, a burst of requests served and a
first request timed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STARTUP = ["-m", "ttsfleet_runtime", "bench", "startup"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_cold_and_a_warm_start_are_timed_and_summarised(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, *STARTUP, "--out", str(out), "--sizes", "tiny", "--device", "cpu"]
        + ["--ckpt-dir", str(tmp_path / "ckpt"), "--cache-dir", str(tmp_path / "cache")]
        + ["--port", "8931", "--budget-s", "800"]
        + ["--background-s", "0", "--max-batch", "4", "--burst", "3"],
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "startup.json").read_text())
    tiny = report["sizes"]["tiny"]
    assert "errors" not in tiny
    for start in ("cold", "warm"):
        run = tiny[start]
        phases = run["phases"]
        assert list(phases)[:2] == ["import", "load_weights"] and "total" in phases
        # The server's clock starts when the process does; the bench's just before it.
        assert 0 < phases["total"] <= run["wall_ready_s"] + 0.05 <= phases["total"] + 2.0
        assert run["first_request"]["ttfa_ms"] > 0 and run["first_request"]["audio_s"] > 0
        assert run["burst"]["served"] == 3 and not run["burst"]["errors"]
        assert any('phase="total"' in line for line in run["metrics_lines"])
        assert (out / run["log"]).is_file()
    assert tiny["startup_s"] == tiny["warm"]["wall_ready_s"]
    assert tiny["startup_s_cold"] == tiny["cold"]["wall_ready_s"]
    assert "--compile-cache-dir" in tiny["warm"]["serve_command"]
    # The server keyed its cache folder by versions and device inside the one given.
    (keyed,) = (tmp_path / "cache" / "tiny").iterdir()
    assert keyed.name.endswith("cpu") and "torch-" in keyed.name
    table = done.stdout[done.stdout.index(" size start") :]
    assert " tiny  cold" in table and " tiny  warm" in table
