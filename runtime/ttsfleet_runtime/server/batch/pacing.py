"""How many batch items a pod's worker may hold now: as many as interactive traffic lets.

The engine's priority (engine/scheduler.py) keeps batch rows off the slots and the
iterations interactive requests need, but a batch item still costs everyone something:
its row in every decode step, its prefill, its audio through the codec thread, its
storage calls on the event loop. How much that costs depends on the hardware, the model
and the interactive load, so the worker measures it instead of assuming it: the time to
first audio of the interactive requests this pod served in the last `window_s`, against
`--batch-ttfa-budget`.

Additive increase, multiplicative decrease (TCP's congestion window, applied to items
held): every quarter window, the limit halves when the interactive p95 of the window is
over the budget, and grows by a sixteenth of the worker's concurrency when it is not (or
when no interactive request came). A decrease forgets the requests that made it: the
next decision judges only those that came after it, so one slow moment halves the limit
once, not at every decision while it is in the window. The limit starts at that
sixteenth, so a batch that begins under interactive load ramps up instead of arriving at
full concurrency, and it never drops below one item: a batch always progresses, at a
trickle while interactive traffic alone is over the budget. Items already running
finish; the limit acts on what the worker claims next, so it follows the load within
about an item's synthesis time (the H200 run in docs/batch.md: interactive p95 over the
budget by about that lag).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable


class BatchPacing:
    def __init__(
        self,
        concurrency: int,
        budget_s: float,
        window_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.concurrency = concurrency  # the most the worker ever holds
        self.budget_s = budget_s  # interactive p95 time to first audio the batch may not push past
        self.window_s = window_s
        self.step = max(1, concurrency // 16)
        self.limit = min(concurrency, self.step)
        self._clock = clock
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self._decided_at = clock()

    def first_audio(self, ttfa_s: float) -> None:
        """An interactive request's time to first audio, as the server measured it."""
        self._samples.append((self._clock(), ttfa_s))

    def allowed(self) -> int:
        """Batch items the worker may hold now."""
        now = self._clock()
        if now - self._decided_at >= self.window_s / 4:
            self._decide(now)
        return self.limit

    def interactive_p95_s(self) -> float | None:
        """p95 of the interactive times to first audio in the window (None: none came)."""
        if not self._samples:
            return None
        ttfas = sorted(ttfa for _, ttfa in self._samples)
        return ttfas[round(0.95 * (len(ttfas) - 1))]

    def _decide(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        p95 = self.interactive_p95_s()
        if p95 is not None and p95 > self.budget_s:
            self.limit = max(1, self.limit // 2)
            self._samples.clear()  # judged: the next decision is on what follows it
        else:
            self.limit = min(self.concurrency, self.limit + self.step)
        self._decided_at = now
