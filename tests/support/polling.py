"""Waiting for something to become true, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 60,
    interval: float = 0.5,
    what: str = "condition",
) -> Any:
    """Poll until condition() returns something truthy; return it. Fails with `what`."""
    deadline = time.monotonic() + timeout
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)
