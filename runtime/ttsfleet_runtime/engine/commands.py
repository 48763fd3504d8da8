"""The commands other threads send the engine thread, and its inbox. No torch.

Commands: add a request, abort one (a cancel) or all (shutdown), pause or resume
one whose caller has fallen behind (backpressure: `EngineStream` decides, the
scheduler applies), and a codec failure.

vLLM v1's split: the front end (tts_engine.py, on the caller's event loop) and the
codec worker (its own thread) never change the scheduler or a `Sequence`; they
send a command, and the engine thread applies every command waiting at the top
of each iteration (`Inbox.drain`), through the scheduler's transitions. So a
request's status has one owner, on one thread.

What the front end reads meanwhile (the queue bound at admission, stats) is the
scheduler with the commands on their way applied: an admitted request counts as
waiting at once, a cancelled one stops counting at once.
"""

from __future__ import annotations

import dataclasses
import queue
import threading

from .api import FinishReason
from .scheduler import Scheduler
from .sequence import Sequence


@dataclasses.dataclass(frozen=True)
class Add:
    """Queue a request the front end admitted."""

    seq: Sequence


@dataclasses.dataclass(frozen=True)
class Abort:
    """End a request now (a cancel; shutdown): `seq`, or every request when None."""

    seq: Sequence | None
    reason: FinishReason


@dataclasses.dataclass(frozen=True)
class Pause:
    """The request's caller has more audio waiting than its buffer: leave it out of
    the decode steps (it keeps its slot) until `Resume`."""

    seq: Sequence


@dataclasses.dataclass(frozen=True)
class Resume:
    """The request's caller has taken enough of its audio: step it again."""

    seq: Sequence


@dataclasses.dataclass(frozen=True)
class CodecFailed:
    """The codec worker could not decode the sequence with this key: end it."""

    key: int


Command = Add | Abort | Pause | Resume | CodecFailed


class Inbox:
    """A thread-safe queue of commands for one scheduler. `lock` is held by the engine
    thread while it changes the scheduler, and by readers for a whole view."""

    def __init__(self, scheduler: Scheduler, lock: threading.RLock):
        self.scheduler = scheduler
        self.lock = lock
        self._queue: queue.SimpleQueue[Command] = queue.SimpleQueue()
        # Sent and not applied yet, by sequence key (guarded by `lock`).
        self._adding: dict[int, Sequence] = {}
        self._aborting: set[int] = set()

    # ------------------------------------------------------------ any thread
    def check_room(self, background: bool = False) -> None:
        """Raise QueueFullError when the waiting queue is full, counting the interactive
        requests on their way to it. Batch work (`background`) is never refused here: the
        batch worker bounds its own rows, and they count against no interactive caller."""
        if background:
            return
        with self.lock:
            self.scheduler.check_room(sum(not q.background for q in self._adding.values()))

    def add(self, seq: Sequence) -> None:
        """Send an admitted request, or raise QueueFullError."""
        with self.lock:
            if not seq.background:
                self.scheduler.check_room(sum(not q.background for q in self._adding.values()))
            self._adding[seq.key] = seq
        self._queue.put(Add(seq))

    def abort(self, seq: Sequence | None, reason: FinishReason) -> None:
        """End `seq` (None: every request) when the engine thread next drains."""
        if seq is not None:
            with self.lock:
                if not seq.finished:
                    self._aborting.add(seq.key)
        self._queue.put(Abort(seq, reason))

    def pace(self, seq: Sequence, paused: bool) -> None:
        """Pause or resume `seq`'s decode steps when the engine thread next drains."""
        self._queue.put(Pause(seq) if paused else Resume(seq))

    def send(self, command: CodecFailed) -> None:
        self._queue.put(command)

    @property
    def pending(self) -> bool:
        """Whether an admitted request has not reached the scheduler yet."""
        with self.lock:
            return bool(self._adding)

    def counts(self) -> tuple[int, int]:
        """(requests waiting, requests holding a slot), the commands on their way
        applied."""
        with self.lock:
            scheduler, aborting = self.scheduler, self._aborting
            waiting = [*scheduler.waiting, *self._adding.values()]
            # Batch rows waiting for room are not a queue anyone waits on (nor a reason
            # to scale out): the queue depth is interactive requests only.
            return (
                sum(seq.key not in aborting and not seq.background for seq in waiting),
                sum(seq.key not in aborting for seq in scheduler.running.values()),
            )

    def paused(self) -> int:
        """Requests holding a slot whose decode steps are paused for their caller,
        the aborts on their way applied (as `counts`: a stream that is cut stops
        counting at once)."""
        with self.lock:
            running, aborting = self.scheduler.running.values(), self._aborting
            return sum(seq.paused and seq.key not in aborting for seq in running)

    # ------------------------------------------------------------ engine thread
    def drain(self) -> int:
        """Apply every command sent so far, in order. -> how many."""
        applied = 0
        with self.lock:
            while True:
                try:
                    command = self._queue.get_nowait()
                except queue.Empty:
                    return applied
                self._apply(command)
                applied += 1

    def _apply(self, command: Command) -> None:
        scheduler = self.scheduler
        if isinstance(command, Add):
            del self._adding[command.seq.key]
            scheduler.add(command.seq)
        elif isinstance(command, Abort):
            if command.seq is not None:
                self._aborting.discard(command.seq.key)
                seqs = [command.seq]
            else:
                seqs = [*scheduler.waiting, *scheduler.running.values()]
            for seq in seqs:
                scheduler.finish(seq, command.reason)
        elif isinstance(command, Pause):
            scheduler.pause(command.seq)
        elif isinstance(command, Resume):
            scheduler.resume(command.seq)
        elif isinstance(command, CodecFailed):
            seq = scheduler.find(command.key)
            if seq is not None:
                scheduler.finish(seq, "error")
