"""BackgroundCapture: the CUDA graphs a serving engine captures while idle.

`ttsfleet serve` captures only the graphs the warm-up synthesis and single streams use
before it reports ready (the smallest buckets), and the rest once serving: the decode
and prefill graphs on the engine thread between iterations with nothing to do, the
codec's on its own thread likewise, the largest bucket first (the codec's at every frame
count), then the others smallest first. Until then a batch larger than every captured
graph captures its own (decode, prefill) or runs eagerly (codec). The start then grows
with neither the number nor the size of the buckets: at --max-batch 256 the largest
took most of ~2 s. `capture_background` in the start-up clock records how long until
the last one.
"""

from __future__ import annotations

import logging
import threading
import time

from .graph_capture import buckets_after_ready
from .startup import StartupClock

log = logging.getLogger(__name__)


class BackgroundCapture:
    def __init__(self, startup: StartupClock):
        self.startup = startup
        self._lock = threading.Lock()  # the engine and the codec thread both count down
        self._left = 0
        self._started = 0.0
        self._runner = None  # the ModelRunner whose graphs are left, while some are

    def start(self, runner, codec, codec_worker, capture_all_graphs: bool) -> None:
        """Queue what the start left out: the codec's graphs on the codec worker, the
        runner's for `capture_one` (engine thread, while idle)."""
        if not runner.use_graphs:
            return
        codec_graphs = [
            (batch, frames)
            for batch in buckets_after_ready(runner.batch_buckets)
            for frames in codec_worker.frame_buckets
            if not codec.has_graph(batch, frames)
        ]
        runner_graphs = len(runner.graphs_left) if capture_all_graphs else 0
        with self._lock:
            self._left = runner_graphs + len(codec_graphs)
            self._started = time.monotonic()
        self._runner = runner if runner_graphs else None
        if codec_graphs:
            codec_worker.capture_later(codec_graphs, self._captured)

    def capture_one(self) -> bool:
        """Capture one decode or prefill graph left for after ready (engine thread):
        True when there was one."""
        if self._runner is None:
            return False
        started = time.monotonic()
        try:
            captured = self._runner.capture_next()
        except Exception:
            # Steps replay a larger captured graph instead, or capture their own
            # bucket's on first use: slower, still correct.
            log.exception("capturing a graph after start-up failed; capturing no more")
            captured = None
        if captured is None:
            self._runner = None
            return False
        # A request that arrives now waits for this: the longest one bounds what the
        # first requests after ready may wait.
        log.debug(
            "captured a graph after ready",
            extra={
                "worker": "engine",
                "graph": captured[0],
                "bucket": captured[1],
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        self._captured()
        return True

    def _captured(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
        self.startup.after_ready("capture_background", time.monotonic() - self._started)
