"""Launching a decode step, and finding the rows that make one fail.

The batched decode step is retryable: the runner commits a row's state only at the end
of a successful step, and the engine advances its host-side bookkeeping only after one.
So when launching a step raises, the rows are bisected (steps over halves of them,
waited for) until the rows whose presence makes it fail are found; the engine ends
those with "error" and the others step on. Sampling noise is counter-based per row
(model/sampling.py), so a row samples the same codes in any of these sub-steps as in
the full one: a bystander's audio is identical to a run without the fault.

A failure that surfaces only when the results are read (`StepInFlight.result`) is the
device's, not a row's: an asynchronous CUDA error leaves the context unusable, so the
engine's loop-fault path ends every stream.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import numpy as np

from .model_runner import ModelRunner, StepOutput
from .sequence import Sequence

log = logging.getLogger(__name__)


@dataclasses.dataclass
class StepInFlight:
    """A decode step the engine launched and has not applied yet: its rows, and
    its codes on the device's way to the host (`output`) or already there
    (`codes`, `nxt`: a step bisected around a failing row, run and waited for)."""

    rows: list[Sequence]
    output: StepOutput | None
    launched_at: float | None  # None: the bisected sub-steps, not one step's period
    codes: np.ndarray | None = None
    nxt: np.ndarray | None = None

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(frame codes [extent, groups], next first codes [extent]) on the host."""
        if self.output is not None:
            codes, nxt = self.output.result()
            return codes.numpy(), nxt.numpy()
        return self.codes, self.nxt


@dataclasses.dataclass
class Launched:
    step: StepInFlight
    culprits: list[tuple[Sequence, Exception]]  # rows that fail the step: to end


def launch(runner: ModelRunner, rows: list[Sequence], extent: int, live: int) -> StepOutput:
    """Launch one decode step advancing `rows` (see `ModelRunner.launch_decode`)."""
    active = [False] * extent
    for seq in rows:
        active[seq.slot] = True
    return runner.launch_decode(extent, active, live)


def launch_isolating(
    runner: ModelRunner,
    rows: list[Sequence],
    extent: int,
    live: int,
    others_in_batch: Callable[[list[Sequence]], bool],
) -> Launched:
    """The decode step over `rows`, launched; when launching raises, bisected as the
    module says. `others_in_batch(rows)`: whether the batch holds occupied rows besides
    `rows`. Raises the step's exception when no row is to blame."""
    try:
        return Launched(
            StepInFlight(rows, launch(runner, rows, extent, live), time.monotonic()), []
        )
    except Exception as exc:
        log.warning(
            "decode step failed; isolating the requests that cause it",
            extra={"rows": len(rows), "error": repr(exc)},
        )
        first_failure = exc
    stepped: list[Sequence] = []
    culprits: list[tuple[Sequence, Exception]] = []
    codes = np.zeros((extent, runner.groups), dtype=np.int64)
    nxt = np.zeros(extent, dtype=np.int64)

    def attempt(group: list[Sequence]) -> None:
        # A row stepped in an earlier attempt sits one position further on;
        # as a bystander now it still writes there, which must be in view.
        length = live + 1 if stepped else live
        try:
            output = launch(runner, group, extent, length).result()
            group_codes, group_nxt = output[0].numpy(), output[1].numpy()
        except Exception as exc:
            if len(group) == 1:
                culprits.append((group[0], exc))
                return
            half = len(group) // 2
            attempt(group[:half])
            attempt(group[half:])
            return
        for seq in group:
            codes[seq.slot] = group_codes[seq.slot]
            nxt[seq.slot] = group_nxt[seq.slot]
        stepped.extend(group)

    if len(rows) == 1:
        # Nothing to bisect: the step's own exception is this row's (an
        # OOM must stay recognisable as one to the server).
        culprits.append((rows[0], first_failure))
    else:
        half = len(rows) // 2
        attempt(rows[:half])
        attempt(rows[half:])
    if len(culprits) == len(rows) and (len(rows) > 1 or others_in_batch(rows)):
        # No row is to blame: each fails alone, so the fault is the batch's (the
        # device) or a row that is in it but never a candidate (a stalled text, one
        # waiting to prefill its next piece). Nothing was stepped: the loop's fault.
        raise first_failure
    return Launched(StepInFlight(stepped, None, None, codes, nxt), culprits)
