"""Draining: the pod stops taking work but lets what it started finish.

On SIGTERM Kubernetes first removes the pod from Service endpoints, which takes
a moment to reach every proxy. Meanwhile the listener stays open: readiness
answers 503 and new speech is refused with 503 + Retry-After (a client or
proxy retries elsewhere) while in-flight utterances run to their end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Drain:
    def __init__(self):
        self.draining = False
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # Told once when draining begins: the batch worker hands its leases back at once.
        self._on_begin: list[Callable[[], None]] = []

    def on_begin(self, callback: Callable[[], None]) -> None:
        self._on_begin.append(callback)

    @property
    def inflight(self) -> int:
        return self._inflight

    def begin(self) -> None:
        if not self.draining:
            self.draining = True
            for callback in self._on_begin:
                callback()

    def acquire(self) -> None:
        self._inflight += 1
        self._idle.clear()

    def release(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """True when nothing is in flight, False if the deadline passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=max(0.0, timeout_s))
            return True
        except TimeoutError:
            return False
