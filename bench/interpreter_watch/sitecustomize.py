"""What a Python process's interpreter does while it serves: garbage collector pauses and
each thread's CPU time, one JSON line per interval. For `ttsfleet serve` under
`ttsfleet-runtime bench capacity` or any load, where the server's engine, codec and HTTP threads share
one interpreter lock (docs/benchmarks.md).

Put this folder first on the server's PYTHONPATH (Python imports `sitecustomize` at start)
and name a log file:

    TTSFLEET_WATCH_LOG=/tmp/watch.jsonl PYTHONPATH=bench/interpreter_watch:$PYTHONPATH \\
        python3 -m ttsfleet_runtime bench capacity --out $OUT ...

Each line: `t` (Unix seconds), `gc` {generation: [collections, total ms, longest ms,
collections over 5 ms, objects collected]} for the interval, `cpu_s` {thread name: CPU
seconds in the interval, "process": all of them} and `sys_s` (the part of it spent in the
kernel: socket writes, futex waits) from /proc (Linux). A thread waiting in a CUDA
synchronize spins, so its CPU time is not all Python.
`python3 bench/interpreter_watch/sitecustomize.py LOG` prints the totals. Without
TTSFLEET_WATCH_LOG this module does nothing.

With TTSFLEET_WATCH_CENSUS_S set, every that many seconds a `census` line also says
what a full collection has to traverse: the tracked objects per generation, the frozen
ones (`gc.freeze`), and the commonest types in the oldest generation. Taking it holds
the interpreter lock (tens of ms for a million objects): a diagnosis, not for a
measured run.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

SLOW_MS = 5.0


def _cpu_s(stat_path: str, ticks: int) -> tuple[float, float] | None:
    """(User + system, system) CPU seconds from a /proc stat file (None if it is gone)."""
    try:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[12]) / ticks


def watch(path: str, interval_s: float) -> None:
    """Log GC pauses and per-thread CPU to `path` every `interval_s` (runs forever)."""
    import gc

    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    collected = {0: 0, 1: 0, 2: 0}
    started: dict[int, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        generation = info["generation"]
        if phase == "start":
            started[generation] = time.perf_counter()
        elif generation in started:
            pauses[generation].append((time.perf_counter() - started.pop(generation)) * 1000)
            collected[generation] += info["collected"]

    gc.callbacks.append(on_gc)
    ticks = os.sysconf("SC_CLK_TCK")
    last: dict[str, float] = {}
    census_s = float(os.environ.get("TTSFLEET_WATCH_CENSUS_S") or 0)
    next_census = time.monotonic() + census_s
    with open(path, "a") as out:
        while True:
            time.sleep(interval_s)
            if census_s and time.monotonic() >= next_census:
                next_census += census_s
                out.write(json.dumps({"t": round(time.time(), 2), "census": census()}) + "\n")
            cpu, kernel = {}, {}
            stats = {t.name: f"/proc/self/task/{t.native_id}/stat" for t in threading.enumerate()}
            for name, stat_path in {**stats, "process": "/proc/self/stat"}.items():
                read = _cpu_s(stat_path, ticks)
                if read is not None:
                    cpu[name] = round(read[0] - last.get(name, 0.0), 3)
                    kernel[name] = round(read[1] - last.get(name + "/sys", 0.0), 3)
                    last[name], last[name + "/sys"] = read
            collections = {}
            for generation in pauses:
                taken, pauses[generation] = pauses[generation], []
                freed, collected[generation] = collected[generation], 0
                if taken:
                    collections[generation] = [
                        len(taken),
                        round(sum(taken), 2),
                        round(max(taken), 2),
                        sum(ms > SLOW_MS for ms in taken),
                        freed,
                    ]
            line = {"t": round(time.time(), 2), "gc": collections, "cpu_s": cpu, "sys_s": kernel}
            out.write(json.dumps(line) + "\n")
            out.flush()


def census(top: int = 25) -> dict:
    """What a full collection traverses now: tracked objects per generation, the
    frozen ones, and the commonest types of the oldest generation."""
    import gc
    from collections import Counter

    oldest = gc.get_objects(generation=2)
    types = Counter(type(o).__qualname__ for o in oldest)
    del oldest
    return {
        "objects": [len(gc.get_objects(generation=g)) for g in (0, 1)] + [sum(types.values())],
        "frozen": gc.get_freeze_count(),
        "oldest_types": dict(types.most_common(top)),
    }


def totals(path: str) -> dict:
    """A log's totals: per generation [collections, total ms, longest ms, over 5 ms,
    objects collected], and per thread its CPU seconds and share of the logged time."""
    lines = [json.loads(text) for text in Path(path).read_text().splitlines() if text.strip()]
    collections: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    kernel: dict[str, float] = {}
    lines = [line for line in lines if "census" not in line]
    for line in lines:
        for generation, (n, total, longest, slow, freed) in line["gc"].items():
            sums = collections.setdefault(generation, [0, 0.0, 0.0, 0, 0])
            sums[0] += n
            sums[1] = round(sums[1] + total, 2)
            sums[2] = max(sums[2], longest)
            sums[3] += slow
            sums[4] += freed
        for name, seconds in line["cpu_s"].items():
            cpu[name] = round(cpu.get(name, 0.0) + seconds, 3)
        for name, seconds in line.get("sys_s", {}).items():
            kernel[name] = round(kernel.get(name, 0.0) + seconds, 3)
    span = lines[-1]["t"] - lines[0]["t"] if len(lines) > 1 else None
    return {
        "lines": len(lines),
        "gc": collections,
        "cpu_s": cpu,
        "sys_s": kernel,
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
