"""One command per job: the runtime's CLI owns the engine benchmark (and its parity
check); no script in bench/ is a second way to run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_benchmark_runs_from_the_runtime_cli_with_its_parity_check():
    result = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert "--parity" in result.stdout and "--sizes" in result.stdout


def test_no_bench_script_wraps_the_engine_benchmark():
    wrappers = [
        p.name
        for p in (ROOT / "bench").glob("*.py")
        if "ttsfleet_runtime import benchmark" in p.read_text()
    ]
    assert wrappers == []
