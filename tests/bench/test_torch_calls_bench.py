"""bench/torch_calls.py, tiny: the engine thread's torch calls counted per iteration and
phase, with the events (prompts, released slots, steps) they are divided by."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_threads_torch_calls_are_counted_by_phase(tmp_path):
    report_path = tmp_path / "torch_calls.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "torch_calls.py"), "--json", str(report_path)]
        + ["--streams", "4", "--max-batch", "4", "--min-frames", "3", "--max-frames", "6"]
        + ["--skip", "5", "--iterations", "20"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT / "runtime")},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    events = report["events"]
    assert events["iterations"] == 20 and events["steps"] > 0
    # Streams end and are replaced while it counts: every phase of the loop happens.
    assert events["prompts"] > 0 and events["released_slots"] > 0
    per_iteration = report["per_iteration"]
    assert {"prefill", "launch", "take_text", "prompt", "release", "complete"} <= set(per_iteration)
    assert abs(report["total_per_iteration"] - sum(per_iteration.values())) < 0.05
    # A decode step is one graph replay's worth on the GPU: counted as one call, the
    # launch's bookkeeping stays a few dozen calls (eager CPU ops would be hundreds).
    assert 0 < per_iteration["launch"] < 60
