"""How a serving process tunes its Python interpreter once the engine has started,
and puts it back at shutdown (servers run inside a test process too).

The engine thread, the codec thread and the event loop share one interpreter lock.
Two things stop the engine's steps and the codec's calls for longer than the device
work they wait on:

- A full garbage collection traverses every tracked object while it holds the lock.
  On the H100 at 100-140 req/s (1.7B) these came every 10-20 s and took 105-188 ms
  each; with the objects alive at ready frozen (`gc.freeze`), 13-45 ms, and p99 time
  to first audio at 100/s fell from 174-204 ms to 58 ms in the same lease. What
  start-up made lives as long as the process, so nothing is lost by never collecting
  it; reference counting still frees what is not in a cycle.
- torch releases the lock around every operation it launches, and taking it back waits
  for whichever thread runs Python meanwhile to give it up: up to the switch interval,
  5 ms by default, for every launch of a prefill's few dozen operations. At 0.5 ms the
  engine's turn comes back ten times sooner; the price is more frequent hand-overs
  between the threads that run Python, microseconds each.

bench/results/h100-2026-11-24-issue12-s12-*: the lease-by-lease runs behind these figures.
"""

from __future__ import annotations

import gc
import logging
import sys
import time

log = logging.getLogger(__name__)

# Seconds a thread may run Python before one waiting for the lock gets it (sys default 0.005).
SWITCH_INTERVAL_S = 0.0005


class ServingInterpreter:
    """`start()` once the engine is ready, `stop()` after it stopped."""

    def __init__(self):
        self._switch_interval_before: float | None = None

    def start(self) -> None:
        self._switch_interval_before = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        started = time.monotonic()
        gc.collect()
        gc.freeze()
        log.info(
            "interpreter tuned for serving: start-up objects frozen out of full collections",
            extra={
                "frozen_objects": gc.get_freeze_count(),
                "seconds": round(time.monotonic() - started, 3),
                "switch_interval_ms": SWITCH_INTERVAL_S * 1000,
            },
        )

    def stop(self) -> None:
        gc.unfreeze()
        if self._switch_interval_before is not None:
            sys.setswitchinterval(self._switch_interval_before)
            self._switch_interval_before = None
