"""How a serving process tunes its Python interpreter once the engine has started,
and puts it back at shutdown (servers run inside a test process too).

The engine thread, the codec thread and the event loop share one interpreter lock. A
full garbage collection traverses every tracked object while it holds the lock, so
it stops the engine's steps and the codec's calls for as long as it takes. On the
H100 at 100-140 req/s (1.7B) these came every 10-20 s and took 105-188 ms each; with
the objects alive at ready frozen (`gc.freeze`), 13-45 ms, and p99 time to first
audio at 100/s fell from 174-204 ms to 58 ms in the same lease. What start-up made
lives as long as the process, so nothing is lost by never collecting it; reference
counting still frees what is not in a cycle.

Python's thread switch interval (5 ms) stays. A 0.5 ms one was measured against it in
one lease, alternating: at 120 req/s p95 time to first audio 273 ms with 22% of the
streams underrunning, against 83 ms and none; forced hand-overs ten times as often
cost more than the shorter waits for the lock win.

The runs behind these figures: `git show 7d79071:bench/results/README.md`, session 12
(files h100-2026-11-24-issue12-s12-* at that commit; docs/benchmarks.md).
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def tune_for_serving() -> None:
    """Once the engine is ready: freeze what start-up made out of full collections."""
    started = time.monotonic()
    gc.collect()
    gc.freeze()
    log.info(
        "start-up objects frozen out of the garbage collector's full passes",
        extra={
            "frozen_objects": gc.get_freeze_count(),
            "seconds": round(time.monotonic() - started, 3),
        },
    )


def restore() -> None:
    """After the engine stopped: what start-up made may be collected again."""
    gc.unfreeze()
