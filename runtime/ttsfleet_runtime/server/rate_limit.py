"""Per-caller limits: token buckets (a steady rate with room for short bursts)
and counters of things a caller holds open at once (WebSocket sessions)."""

from __future__ import annotations

import time


class TokenBucketLimiter:
    """`take(caller)` spends one token or says how long until one is back.

    A rate of 0 disables limiting. Buckets of callers idle long enough to be
    full again are forgotten, so memory stays bounded by active callers.
    """

    def __init__(self, rate_per_s: float, burst: int, clock=time.monotonic):
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, updated_at)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def _tokens(self, caller: str, now: float) -> float:
        tokens, updated = self._buckets.get(caller, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - updated) * self.rate)

    def wait_s(self, caller: str) -> float:
        """Seconds until `caller` has a token (0.0: now), spending nothing."""
        if not self.enabled:
            return 0.0
        tokens = self._tokens(caller, self._clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def take(self, caller: str) -> float:
        """Return 0.0 when allowed, else seconds until a token is available."""
        if not self.enabled:
            return 0.0
        now = self._clock()
        tokens = self._tokens(caller, now)
        if tokens >= 1.0:
            self._buckets[caller] = (tokens - 1.0, now)
            self._forget_idle(now)
            return 0.0
        self._buckets[caller] = (tokens, now)
        return (1.0 - tokens) / self.rate

    def _forget_idle(self, now: float) -> None:
        if len(self._buckets) < 10_000:
            return
        full_after = self.burst / self.rate
        self._buckets = {c: b for c, b in self._buckets.items() if now - b[1] < full_after}


class ConcurrencyLimiter:
    """At most `limit` things open per caller at once; a limit of 0 disables it."""

    def __init__(self, limit: int):
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, caller: str) -> bool:
        """Count one more for `caller`, or return False (nothing counted) at the limit."""
        held = self._open.get(caller, 0)
        if self.limit > 0 and held >= self.limit:
            return False
        self._open[caller] = held + 1
        return True

    def release(self, caller: str) -> None:
        held = self._open.get(caller, 0) - 1
        if held > 0:
            self._open[caller] = held
        else:
            self._open.pop(caller, None)
