"""bench/http_overhead.py, tiny: a server per protocol in its own process, a few streamed
requests each, the server's CPU per request read from /proc and written with the raw
samples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "http_overhead.py"
PROTOCOLS = ["h11-guarded", "httptools-guarded"]


def test_every_protocol_streams_every_request_and_its_cpu_is_counted(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--protocols", ",".join(PROTOCOLS)]
        + ["--requests", "30", "--warmup", "2", "--concurrency", "3", "--repeats", "1"]
        + ["--audio-s", "0.5", "--chunks", "3", "--chunk-interval-s", "0"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "http_overhead.json").read_text())
    assert report["settings"]["chunk_frames"] == [2, 2, 2]
    assert [s["protocol"] for s in report["samples"]] == PROTOCOLS
    for sample in report["samples"]:
        assert sample["failed"] == 0 and sample["requests"] == 30
        assert sample["server_cpu_s"] > 0 and sample["requests_per_s"] > 0
        # Read a moment apart, in clock ticks (10 ms): the loop's share within a tick or two.
        assert sample["loop_thread_cpu_s"] <= sample["server_cpu_s"] + 0.02
    assert set(report["summary"]) == set(PROTOCOLS)
    assert report["machine"]["cpus"] and report["versions"]["uvicorn"]
    assert "httptools-guarded" in done.stdout
