"""What a Python process's interpreter does while it serves: garbage collector pauses and
each thread's CPU time, one JSON line per interval. For `ttsfleet serve` under
`bench/capacity.py` or any load, where the server's engine, codec and HTTP threads share
one interpreter lock (bench/results README, session 12).

Put this folder first on the server's PYTHONPATH (Python imports `sitecustomize` at start)
and name a log file:

    TTSFLEET_WATCH_LOG=/tmp/watch.jsonl PYTHONPATH=bench/interpreter_watch:$PYTHONPATH \\
        python3 bench/capacity.py --out $OUT ...

Each line: `t` (Unix seconds), `gc` {generation: [collections, total ms, longest ms,
collections over 5 ms]} for the interval, `cpu_s` {thread name: CPU seconds in the interval,
"process": all of them} from /proc (Linux). A thread waiting in a CUDA synchronize spins, so
its CPU time is not all Python. `python3 bench/interpreter_watch/sitecustomize.py LOG`
prints the totals. Without TTSFLEET_WATCH_LOG this module does nothing.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

SLOW_MS = 5.0


def _cpu_s(stat_path: str, ticks: int) -> float | None:
    """User + system CPU seconds from a /proc stat file (None if it is gone)."""
    try:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / ticks


def watch(path: str, interval_s: float) -> None:
    """Log GC pauses and per-thread CPU to `path` every `interval_s` (runs forever)."""
    import gc

    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: dict[int, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        generation = info["generation"]
        if phase == "start":
            started[generation] = time.perf_counter()
        elif generation in started:
            pauses[generation].append((time.perf_counter() - started.pop(generation)) * 1000)

    gc.callbacks.append(on_gc)
    ticks = os.sysconf("SC_CLK_TCK")
    last: dict[str, float] = {}
    with open(path, "a") as out:
        while True:
            time.sleep(interval_s)
            cpu = {}
            stats = {t.name: f"/proc/self/task/{t.native_id}/stat" for t in threading.enumerate()}
            for name, stat_path in {**stats, "process": "/proc/self/stat"}.items():
                total = _cpu_s(stat_path, ticks)
                if total is not None:
                    cpu[name] = round(total - last.get(name, 0.0), 3)
                    last[name] = total
            collections = {}
            for generation in pauses:
                taken, pauses[generation] = pauses[generation], []
                if taken:
                    collections[generation] = [
                        len(taken),
                        round(sum(taken), 2),
                        round(max(taken), 2),
                        sum(ms > SLOW_MS for ms in taken),
                    ]
            line = {"t": round(time.time(), 2), "gc": collections, "cpu_s": cpu}
            out.write(json.dumps(line) + "\n")
            out.flush()


def totals(path: str) -> dict:
    """A log's totals: per generation [collections, total ms, longest ms, over 5 ms], and
    per thread its CPU seconds and share of the logged time."""
    lines = [json.loads(text) for text in Path(path).read_text().splitlines() if text.strip()]
    collections: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for line in lines:
        for generation, (n, total, longest, slow) in line["gc"].items():
            sums = collections.setdefault(generation, [0, 0.0, 0.0, 0])
            sums[0] += n
            sums[1] = round(sums[1] + total, 2)
            sums[2] = max(sums[2], longest)
            sums[3] += slow
        for name, seconds in line["cpu_s"].items():
            cpu[name] = round(cpu.get(name, 0.0) + seconds, 3)
    span = lines[-1]["t"] - lines[0]["t"] if len(lines) > 1 else None
    return {
        "lines": len(lines),
        "gc": collections,
        "cpu_s": cpu,
        "cpu_share": {k: round(v / span, 3) for k, v in cpu.items()} if span else None,
    }


_log = os.environ.get("TTSFLEET_WATCH_LOG")
if _log and __name__ == "sitecustomize":
    threading.Thread(
        target=watch,
        args=(_log, float(os.environ.get("TTSFLEET_WATCH_INTERVAL_S", "2"))),
        name="interpreter-watch",
        daemon=True,
    ).start()

if __name__ == "__main__":
    print(json.dumps(totals(sys.argv[1]), indent=1))
