"""bench/interpreter_watch: a process started with the folder on its path and a log named
writes GC pauses and per-thread CPU time; the totals add them up; without the log named
the module starts nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WATCH = Path(__file__).resolve().parents[2] / "bench" / "interpreter_watch"

# The worker spins for CPU time, not wall time, and the process stays until the watch has
# logged a few lines: on a loaded machine a thread may get a tenth of a core, and a
# wall-clock loop then gives it too little CPU to show (seen in a CI run beside a build).
BUSY = """
import gc, os, threading, time
def spin():
    junk = []
    while time.thread_time() < 1.0:
        junk.append([[] for _ in range(50)])
        if len(junk) > 200:
            junk.clear()
            gc.collect()
worker = threading.Thread(target=spin, name="busy-worker")
worker.start()
worker.join()
log = os.environ.get("TTSFLEET_WATCH_LOG")
deadline = time.monotonic() + 30
while log and time.monotonic() < deadline:
    with open(log) as f:
        if len(f.readlines()) >= 4:
            break
    time.sleep(0.05)
print(sorted(t.name for t in threading.enumerate()))
"""


def run(tmp_path, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(WATCH), **env}
    return subprocess.run(
        [sys.executable, "-c", BUSY], env=environment, capture_output=True, text=True, timeout=60
    )


def test_a_watched_process_logs_gc_pauses_and_thread_cpu(tmp_path):
    log = tmp_path / "watch.jsonl"
    done = run(tmp_path, TTSFLEET_WATCH_LOG=str(log), TTSFLEET_WATCH_INTERVAL_S="0.3")
    assert done.returncode == 0, done.stderr
    assert "interpreter-watch" in done.stdout
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    assert len(lines) >= 3
    assert any(line["cpu_s"].get("busy-worker", 0) > 0 for line in lines)
    assert any("2" in line["gc"] for line in lines)  # the worker's full collections
    totals = json.loads(
        subprocess.run(
            [sys.executable, str(WATCH / "sitecustomize.py"), str(log)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    count, total_ms, longest_ms, _, freed = totals["gc"]["2"]
    assert count >= 1 and 0 < longest_ms <= total_ms and freed == 0  # no cycles made
    assert totals["cpu_s"]["busy-worker"] > 0.3 and totals["lines"] == len(lines)
    assert 0 <= totals["sys_s"]["busy-worker"] <= totals["cpu_s"]["busy-worker"]


KEEP = """
import gc, time
class Kept:
    pass
kept = [Kept() for _ in range(5000)]
gc.collect()  # into the oldest generation
time.sleep(1.0)
"""


def test_a_census_counts_what_a_full_collection_traverses(tmp_path):
    log = tmp_path / "watch.jsonl"
    environment = {
        **os.environ,
        "PYTHONPATH": str(WATCH),
        "TTSFLEET_WATCH_LOG": str(log),
        "TTSFLEET_WATCH_INTERVAL_S": "0.2",
        "TTSFLEET_WATCH_CENSUS_S": "0.2",
    }
    done = subprocess.run(
        [sys.executable, "-c", KEEP], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    censuses = [line["census"] for line in lines if "census" in line]
    assert len(censuses) >= 2
    last = censuses[-1]
    assert last["oldest_types"]["Kept"] == 5000 and last["objects"][2] >= 5000
    assert last["frozen"] == 0
    totals = subprocess.run(
        [sys.executable, str(WATCH / "sitecustomize.py"), str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(totals.stdout)["lines"] == len(lines) - len(censuses)


def test_without_a_log_named_it_starts_nothing(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "interpreter-watch" not in done.stdout
