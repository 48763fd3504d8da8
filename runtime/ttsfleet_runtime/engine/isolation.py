"""One request's fault ends only that request: the one "together, else alone" rule
that every batched phase of the engine and the codec worker follows.

A batched call is retried one item at a time only when it leaves no state changed
behind when it raises (the runner's prefill rewrites its slots' whole state; the
codecs commit a stream's state only after a successful call): otherwise the retry
would apply some items twice."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def together_else_alone(
    items: list[T],
    run: Callable[[list[T]], object],
    failed: Callable[[T, Exception], None],
    what: str,
) -> list[T]:
    """`run(items)` in one call; if that raises, `run([item])` for each item, and
    `failed(item, exc)` for each that raises alone. -> the items that ran."""
    if not items:
        return []
    try:
        run(items)
        return items
    except Exception as exc:
        if len(items) == 1:
            failed(items[0], exc)
            return []
        log.warning(
            f"{what} failed; retrying its requests one by one",
            extra={"requests": len(items), "error": repr(exc)},
        )
    done = []
    for item in items:
        try:
            run([item])
            done.append(item)
        except Exception as exc_one:
            failed(item, exc_one)
    return done
