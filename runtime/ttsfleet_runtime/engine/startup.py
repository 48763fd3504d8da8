"""Where a runtime's start-up time goes: one clock from process start to ready.

An autoscaler is only as quick as a new pod, so the start is measured in phases
that follow each other (`metrics.STARTUP_PHASES`): each phase lasts from the end
of the one before to its own end, so the phases add up to the total. Each logs
one structured line as it ends (`startup: PHASE 1.23s`, fields `phase`,
`seconds`, `since_start_s`), and the server exports them as
`ttsfleet_startup_seconds{phase}`.

The clock starts at the process's start as the kernel recorded it (Linux
/proc), so "import" covers the interpreter, the imports, the tokenizer and the
HTTP app: everything before the engine loads weights (in a test process, all
the tests before too). Off Linux it starts when the engine is made.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..metrics import STARTUP_PHASES

log = logging.getLogger(__name__)


def process_start_time() -> float | None:
    """Wall-clock time (epoch seconds) this process started, or None off Linux."""
    try:
        with open("/proc/self/stat") as f:
            # The command name (field 2) may hold spaces: count fields after its ")".
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - started_after_boot)


class StartupClock:
    """The start-up phases of one engine, in seconds, as they end.

    `done(phase)` ends `phase` now; `ready()` ends the start (phase "total":
    process start to ready). `after_ready(phase, seconds)` records work that
    goes on once the engine serves (the background graph captures): it is not
    part of the total. Read `seconds` from any thread.
    """

    def __init__(self, started_at: float | None = None):
        self.started_at = started_at if started_at is not None else process_start_time()
        if self.started_at is None:
            self.started_at = time.time()
        self._last = self.started_at
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}

    def done(self, phase: str) -> float:
        """End `phase` now: its seconds since the previous phase ended (logged)."""
        if phase not in STARTUP_PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}; known: {STARTUP_PHASES}")
        now = time.time()
        seconds = max(0.0, now - self._last)
        self._last = now
        self._record(phase, seconds, now)
        return seconds

    def ready(self) -> float:
        """The start is over: the total from process start (logged)."""
        now = time.time()
        total = now - self.started_at
        self._record("total", total, now)
        return total

    def after_ready(self, phase: str, seconds: float) -> None:
        if phase not in STARTUP_PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}; known: {STARTUP_PHASES}")
        self._record(phase, seconds, time.time())

    def _record(self, phase: str, seconds: float, now: float) -> None:
        with self._lock:
            self._seconds[phase] = seconds
        log.info(
            f"startup: {phase} {seconds:.2f}s",
            extra={
                "phase": phase,
                "seconds": round(seconds, 3),
                "since_start_s": round(now - self.started_at, 3),
            },
        )

    @property
    def seconds(self) -> dict[str, float]:
        """Phase -> seconds, of the phases that have ended (in the order they did)."""
        with self._lock:
            return dict(self._seconds)
