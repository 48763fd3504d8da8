"""`ttsfleet-runtime bench agents` on the CPU with a tiny checkpoint: the one command the
device runs (issue 36) writes the checkpoint, serves it with the session cap raised, runs
voice-agent sessions per level and reports them with the serve command beside the raw
samples."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.ports import free_port


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_agent_levels_run_against_a_served_checkpoint_and_are_reported(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", "agents", "--out", str(out)]
        + ["--size", "tiny", "--device", "cpu", "--sessions", "1,2", "--client-processes", "2"]
        + ["--utterances-per-session", "1", "--reply-chars", "24", "--utterance-s", "0.4"]
        + ["--ckpt-dir", str(tmp_path / "ckpt"), "--port", str(free_port())]
        + ["--budget-s", "500"],
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "agents.json").read_text())
    assert report["benchmark"] == "agents" and "error" not in report
    serve = report["serve_command"]
    assert serve[serve.index("--max-batch") + 1] == "256"
    assert serve[serve.index("--ws-max-sessions-per-key") + 1] == "4096"
    levels = report["agents"]["levels"]
    assert [level["sessions"] for level in levels] == [1, 2]
    assert all(level["utterances_finished"] == level["sessions"] for level in levels)
    raw = json.loads((out / "loadtest.json").read_text())
    assert raw["mode"] == "agents" and len(raw["samples"]) == 3
