"""Decides who runs: admission to a bounded waiting queue, batch slots, and the
order of work. Knows nothing of torch or devices; tests drive it directly.

Order: new requests first. Every running stream needs only one frame per
80 ms of audio while a decode step takes a few milliseconds, so prefilling a
newcomer (time to first audio) is worth more than one step of the others;
a cap on prefills per step keeps a burst of arrivals from stalling everyone.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Generic, Protocol, TypeVar


class Schedulable(Protocol):
    slot: int | None

    @property
    def ready_for_prefill(self) -> bool: ...

    @property
    def runnable(self) -> bool: ...


S = TypeVar("S", bound=Schedulable)


class QueueFullError(Exception):
    def __init__(self, waiting: int, retry_after_s: float):
        super().__init__(f"{waiting} requests already waiting")
        self.retry_after_s = retry_after_s


@dataclasses.dataclass
class Plan(Generic[S]):
    prefill: list[S]  # admitted to a slot now, prefill before the step
    decode: list[S]  # occupy a slot (runnable or stalled on text)


class Scheduler(Generic[S]):
    def __init__(self, max_batch: int, max_queue: int, max_prefills_per_step: int = 4):
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.max_prefills_per_step = max_prefills_per_step
        self.waiting: collections.deque[S] = collections.deque()
        self.running: dict[int, S] = {}  # slot -> sequence
        # Mean seconds a stream holds a slot, for the retry hint.
        self.mean_slot_seconds = 5.0

    def admit(self, seq: S) -> None:
        """Queue `seq` or raise QueueFullError; nothing is held on refusal."""
        if len(self.waiting) >= self.max_queue:
            waves = 1 + len(self.waiting) // max(1, self.max_batch)
            raise QueueFullError(len(self.waiting), round(waves * self.mean_slot_seconds / 2, 1))
        self.waiting.append(seq)

    def plan(self) -> Plan[S]:
        prefill: list[S] = []
        free = sorted(set(range(self.max_batch)) - set(self.running))
        for seq in list(self.waiting):
            if not free or len(prefill) >= self.max_prefills_per_step:
                break
            if not seq.ready_for_prefill:
                continue  # its text has not arrived; later arrivals may go first
            self.waiting.remove(seq)
            # Lowest free slot: keeps the batch a short prefix of the slots.
            seq.slot = free.pop(0)
            self.running[seq.slot] = seq
            prefill.append(seq)
        return Plan(prefill=prefill, decode=[self.running[s] for s in sorted(self.running)])

    def remove(self, seq: S, held_seconds: float | None = None) -> int | None:
        """Take `seq` out of the queue or its slot; returns the freed slot."""
        if seq in self.waiting:
            self.waiting.remove(seq)
            return None
        slot = seq.slot
        if slot is not None and self.running.get(slot) is seq:
            del self.running[slot]
            if held_seconds is not None:
                self.mean_slot_seconds = 0.9 * self.mean_slot_seconds + 0.1 * held_seconds
            return slot
        return None

    @property
    def batch_extent(self) -> int:
        """Slots [0, extent) hold every running sequence."""
        return max(self.running) + 1 if self.running else 0
