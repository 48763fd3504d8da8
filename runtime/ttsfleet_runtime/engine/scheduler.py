"""Decides who runs, and what a step's output means for each sequence.
Knows nothing of torch or devices; tests drive it directly.

Before a step (`plan`, `step_rows`): admission to a bounded waiting queue,
batch slots, the order of prefills, which rows the decode step advances.
After a step (`postprocess`): the rules that turn a row's new frame into
bookkeeping: EOS and length stops, the next piece of a long text, chunk
boundaries (the first chunk after `first_chunk_frames`, then chunks that
double up to `chunk_frames`: `StepRules`). Like nano-vllm's `Scheduler.postprocess` or vLLM's
`update_from_output`, it returns what the engine must do (chunks to decode,
sequences that ended) and does no I/O itself.

The scheduler owns every status change of a sequence, on the engine thread
only: queued (`add`), given a slot (`plan`), prefilled (`prefilled`), moved to its
next piece, finished (`finish`: by its rules, or for the engine: a cancel, a
failure, shutdown) and released (`take_releases`, then `free`: its slot's device
row reset, its KV blocks back). What ended since the engine last asked
(`take_ends`) is what the engine tells the codec worker and the streams.

Order: new requests first. Every running stream needs only one frame per
80 ms of audio while a decode step takes a few milliseconds, so prefilling a
newcomer (time to first audio) is worth more than one step of the others:
each iteration prefills everything ready, in one packed call (the runner's
limits: prompts per call, positions per call), then steps. A running stream
whose next long-text piece is due goes before newcomers: its listener is
already waiting. Waiting requests go in arrival order; the first that does not
fit waits for the next iteration (no later, shorter one overtakes it).

Running streams are protected by their lead over playback. The engine tells
`plan` the least time any playing stream can still wait for its next frames
before its listener runs out of audio (`spare_s`); below `LEAD_GUARD_S` the
iteration prefills at most `GUARDED_PREFILL_TOKENS` positions, so the decode
step comes sooner. At least one prompt is always taken: newcomers never wait
forever behind an overloaded batch.

Priority: a background sequence (`SynthesisRequest.priority` "batch": batch jobs on
spare capacity, docs/batch.md) takes a slot only when no ready interactive request
waits, and background rows hold at most `max_background` slots, so an interactive
request arriving while a batch fills the engine finds a free slot at the next plan.
A prefill lengthens the iteration every stream waits for, so batch prompts also wait
while an interactive stream is making its first chunk (its time to first audio runs
through the next few iterations) and while the lead guard is up, and an iteration
prefills at most `BACKGROUND_PREFILL_TOKENS` positions of them: the batch joins a few
prompts at a time in the gaps, never as a burst in front of a newcomer.
Background rows do not count against the waiting-queue bound that refuses interactive
callers with 429: the batch worker bounds its own rows.

Backpressure: a sequence whose caller has more audio waiting than its
buffer is paused (`pause`, a command from its stream) and left out of the
decode steps, in its slot, until `resume`.

KV memory (`kv`, engine/kv_blocks.py): a newcomer is admitted to a slot only
when the blocks for its prompt are free beyond a watermark (else it and
everyone behind it wait: arrival order is kept); a running row takes one more
block before the step that writes its first position in it, and when none is
free it stalls (stays in its slot, not stepped) until blocks come back. When
every occupied row is stalled that way, no one can finish and free a block:
`kv_deadlock` names the youngest, which the engine ends with an error.
Blocks come back when the engine releases a finished sequence (`release_kv`),
after its slot's device row no longer names them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import numpy as np

from .api import EngineError, FinishReason
from .kv_blocks import KVBlocks
from .sequence import Sequence, Status

log = logging.getLogger(__name__)

# The guard's threshold: a playing stream with less spare time than this
# could underrun if the decode step waited for a full packed prefill (up to
# 1,024 positions: tens of ms for the 1.7B on an H100, bench/prefill_burst.py)
# and the step itself. A stream that has just started has its first chunk's
# 160 ms ahead (2 frames), so a burst's first members do not throttle the rest
# of it; the guard fires when the engine falls behind real time.
LEAD_GUARD_S = 0.1
# Positions one guarded iteration prefills: the smallest buckets, a prefill
# about as long as a decode step, still several typical (~10-position) prompts.
GUARDED_PREFILL_TOKENS = 64
# Positions of batch prompts one iteration prefills (at least one prompt): a few
# typical prompts, a prefill that costs about a decode step, so batch admissions
# spread over the iterations instead of stretching one of them. At ~100 iterations a
# second this still admits far more batch prompts than the slots free up.
BACKGROUND_PREFILL_TOKENS = 128


def default_max_background(max_batch: int) -> int:
    """Slots batch work may hold: three quarters of the batch, at least one."""
    return max(1, max_batch - max(1, max_batch // 4))


class Schedulable(Protocol):
    slot: int | None
    position: int  # next KV position to write
    prompt_length: int  # positions its (next) prefill writes
    kv_blocks: list[int]  # KV blocks held, in position order
    t_admitted: float | None  # when it took its slot (plan sets it)
    background: bool  # batch work: after interactive requests, within max_background
    chunks: int  # chunks made so far (0: its time to first audio is still running)

    @property
    def finished(self) -> bool: ...

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
    prefill: list[S]  # prefill before the step: admitted to a slot now, or a next piece
    deferred: bool = False  # the lead guard left a prompt for later that would have fit


@dataclasses.dataclass(frozen=True)
class StepRules:
    """What the post-step rules need to know of the engine's configuration.

    Chunk sizes ramp up: the first chunk is `first_chunk_frames` (time to first
    audio), and each later one is as long as all the audio before it, up to
    `chunk_frames` (2, 2, 4, 8, 8, ... for 2 and 8). A listener starts playing
    at the first byte, so the next chunk must be made before the audio already
    delivered has played: with chunks that double, that needs only about real
    time, where a fixed 8-frame second chunk after a 2-frame first one needs
    four times real time (8 steps within 160 ms), which a busy batch misses.
    """

    eos_id: int  # the codec id that ends an utterance (or a piece of one)
    max_len: int  # KV positions per slot
    first_chunk_frames: int
    chunk_frames: int  # the steady chunk, once the ramp reaches it

    def chunk_limit(self, index: int, background: bool = False) -> int:
        """Frames of a stream's `index`-th chunk (0-based). Batch work (`background`)
        has no listener to start early: its chunks are `chunk_frames` from the first,
        fewer and larger decoder calls for the codec thread."""
        if background:
            return self.chunk_frames
        if index == 0:
            return self.first_chunk_frames
        before = self.first_chunk_frames << min(index - 1, 16)  # frames made before it
        return min(self.chunk_frames, before)

    def chunk_sizes(self) -> tuple[int, ...]:
        """Every chunk length the ramp makes (the codec captures a graph for each)."""
        sizes, index = {self.first_chunk_frames}, 1
        while (size := self.chunk_limit(index)) < self.chunk_frames:
            sizes.add(size)
            index += 1
        return tuple(sorted(sizes | {self.chunk_frames}))

    def ramp_frames(self) -> int:
        """Frames a stream makes up to its first steady-size chunk: a stream this
        long has made a chunk of every size in `chunk_sizes()` (the warm-up's length)."""
        total, index = 0, 0
        while (size := self.chunk_limit(index)) != self.chunk_frames:
            total += size
            index += 1
        return total + self.chunk_frames


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Frames of one sequence ready for the codec, `index`-th of its stream."""

    seq: Sequence
    codes: np.ndarray  # [frames, groups]
    index: int
    last: bool
    words: tuple = ()  # WordMarks of the words timed since the chunk before (timestamps)


@dataclasses.dataclass
class StepOutcome:
    chunks: list[Chunk]  # in order; hand them to the codec before any end
    finished: list[tuple[Sequence, FinishReason]]  # ended by the rules (finished already)
    next_piece: list[Sequence]  # said EOS with text left: prefilled again next
    failed: list[tuple[Sequence, Exception]]  # their bookkeeping raised: ended with "error"
    frames: int  # frames generated by the step


@dataclasses.dataclass(frozen=True)
class End:
    """A sequence that finished: its stream ends with `reason` (after the audio of its
    chunks for "eos" and "length", at once otherwise)."""

    seq: Sequence
    reason: FinishReason


@dataclasses.dataclass(frozen=True)
class Releases:
    """Finished sequences whose slots the engine must reset on the device (`slots`:
    the freed ones no newer sequence has taken) before their KV blocks are free."""

    seqs: list
    slots: list[int]


@dataclasses.dataclass
class BackgroundRoom:
    """One plan's room for batch prompts (`Scheduler.plan`)."""

    slots: int  # slots background rows may still take
    starting: bool  # an interactive stream is making its first chunk
    guarded: bool  # a playing stream is short of lead
    tokens: int = 0  # batch positions this plan prefills

    def admits(self, seq: Schedulable) -> bool:
        if self.slots <= 0 or self.starting or self.guarded:
            return False
        return not self.tokens or self.tokens + seq.prompt_length <= BACKGROUND_PREFILL_TOKENS

    def took(self, seq: Schedulable) -> None:
        self.slots -= 1
        self.tokens += seq.prompt_length


class Scheduler(Generic[S]):
    def __init__(
        self,
        max_batch: int,
        max_queue: int,
        max_prefill_prompts: int,
        max_prefill_tokens: int,
        kv: KVBlocks | None = None,
        max_background: int | None = None,
    ):
        self.max_batch = max_batch
        # Slots background rows may hold; the rest stay free for interactive arrivals.
        self.max_background = (
            default_max_background(max_batch) if max_background is None else max_background
        )
        # KV blocks; None: memory is not accounted (the engine sets it at load).
        self.kv = kv
        self.kv_stalled: list[S] = []  # running rows the last step_rows left without a block
        self._kv_changed: dict[int, S] = {}  # slot -> sequence whose blocks changed
        self.max_queue = max_queue
        # One packed prefill call's limits (the runner's).
        self.max_prefill_prompts = max_prefill_prompts
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: collections.deque[S] = collections.deque()
        self.running: dict[int, S] = {}  # slot -> sequence
        self.refill: collections.deque[S] = collections.deque()  # running, next piece due
        # Mean seconds a stream holds a slot, for the retry hint.
        self.mean_slot_seconds = 5.0
        self._ends: list[End] = []  # finished since the engine last took them
        self._releasing: list[S] = []  # finished; their slots' device rows still name them

    def check_room(self, on_the_way: int = 0) -> None:
        """Raise QueueFullError when the queue is full (before any admission work);
        `on_the_way`: requests admitted by the front end that `add` has not queued yet."""
        waiting = sum(not q.background for q in self.waiting) + on_the_way
        if waiting >= self.max_queue:
            waves = 1 + waiting // max(1, self.max_batch)
            raise QueueFullError(waiting, round(waves * self.mean_slot_seconds / 2, 1))

    def admit(self, seq: S) -> None:
        """Queue `seq` or raise QueueFullError; nothing is held on refusal."""
        self.check_room()
        self.add(seq)

    def add(self, seq: S) -> None:
        """Queue `seq`, which the front end admitted (`check_room`)."""
        self.waiting.append(seq)

    def prefilled(self, seq: Sequence, position: int) -> bool:
        """`seq`'s current piece is in its slot, `position` positions long: it runs.
        False when it finished meanwhile."""
        seq.position = position
        if seq.finished:
            return False
        seq.status = Status.RUNNING
        seq.awaiting_prefill = False
        return True

    def text_handed(self, seq: Sequence, ids: int, final: bool) -> None:
        """`ids` more trailing text ids of `seq`'s piece are in its runner row, and with
        `final` the text's end: the frames it may step to follow (`runnable`)."""
        seq.text_sent += ids
        seq.text_final = final

    def finish(self, seq: Sequence, reason: FinishReason, error: EngineError | None = None) -> bool:
        """End `seq` now: out of the queue or its slot (free for the next plan), its
        end recorded for the engine (`take_ends`) and its slot and KV blocks for
        release (`take_releases`). False when it had finished already."""
        if seq.finished:
            return False
        timed = seq.t_admitted and seq.times_slot
        held = time.monotonic() - seq.t_admitted if timed else None
        self.remove(seq, held)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        seq.error = error
        self._releasing.append(seq)
        self._ends.append(End(seq, reason))
        return True

    def take_ends(self) -> list[End]:
        """The sequences that finished since the last call, in order."""
        ends, self._ends = self._ends, []
        return ends

    def take_releases(self) -> Releases | None:
        """The finished sequences to release: the engine resets `slots` on the device,
        then calls `free` with it."""
        if not self._releasing:
            return None
        seqs, self._releasing = self._releasing, []
        slots = [
            seq.slot for seq in seqs if seq.slot is not None and self.running.get(seq.slot) is None
        ]
        return Releases(seqs, slots)

    def free(self, releases: Releases) -> None:
        """Their slots' device rows name none of their blocks now (reset, or rewritten
        for the sequence that took the slot): the blocks may be reused."""
        for seq in releases.seqs:
            self.release_kv(seq)

    def pause(self, seq: Sequence) -> None:
        """`seq`'s caller has more audio waiting than it may (`SynthesisRequest.buffer_s`):
        its row leaves the decode steps, keeping its slot and KV blocks, until `resume`.
        Pausing in place, not preempting, keeps its KV and codec state as they are: a
        resumed stream goes on exactly where it stopped, and a paused row costs a
        padding row of the batch, not memory that grows."""
        if not seq.finished:
            seq.paused = True

    def resume(self, seq: Sequence) -> None:
        """`seq`'s caller has taken enough of its audio: step it again."""
        seq.paused = False

    def find(self, key: int) -> S | None:
        """The queued or running sequence whose `key` this is."""
        for seq in (*self.running.values(), *self.waiting):
            if seq.key == key:
                return seq
        return None

    def plan(self, spare_s: float | None = None) -> Plan[S]:
        """The sequences to prefill before the next step, in one packed call.
        `spare_s`: the least time any playing stream can wait for its next
        frames before its listener runs dry (None: nobody is playing)."""
        guarded = spare_s is not None and spare_s < LEAD_GUARD_S
        budget = self.max_prefill_tokens
        if guarded:
            budget = min(budget, GUARDED_PREFILL_TOKENS)
        plan: Plan[S] = Plan(prefill=[])
        tokens = 0

        def take(seq: S, blocks_fit: Callable[[S], bool]) -> bool:
            nonlocal tokens
            if plan.prefill and (
                len(plan.prefill) >= self.max_prefill_prompts or tokens + seq.prompt_length > budget
            ):
                plan.deferred = guarded and (
                    len(plan.prefill) < self.max_prefill_prompts
                    and tokens + seq.prompt_length <= self.max_prefill_tokens
                )
                return False
            if not blocks_fit(seq):
                return False  # too few free KV blocks: wait for them, in order
            plan.prefill.append(seq)
            tokens += seq.prompt_length
            return True

        # A next piece's blocks fit to its new prompt: usually some come back.
        while self.refill and take(self.refill[0], lambda q: self._fit_kv(q, q.prompt_length)):
            self.refill.popleft()
        if self.refill:
            return plan  # a next piece did not fit: no newcomer overtakes it
        free = sorted(set(range(self.max_batch)) - set(self.running))
        interactive_ready = sum(not q.background and q.ready_for_prefill for q in self.waiting)
        room: BackgroundRoom | None = None  # counted once, when a batch prompt is ready
        for seq in list(self.waiting):
            if not free:
                break
            if not seq.ready_for_prefill:
                continue  # its text has not arrived; later arrivals may go first
            if seq.background:
                if room is None:
                    room = self._background_room(guarded)
                if interactive_ready or not room.admits(seq):
                    continue  # batch work only on room and time no interactive request wants
            if not take(seq, self._admit_kv):
                break
            if seq.background:
                room.took(seq)
            else:
                interactive_ready -= 1
                if room is not None:
                    room.starting = True
            self.waiting.remove(seq)
            # Lowest free slot: keeps the batch a short prefix of the slots.
            seq.slot = free.pop(0)
            seq.t_admitted = time.monotonic()  # it holds a batch slot from here
            self.running[seq.slot] = seq
            self._kv_changed[seq.slot] = seq
        return plan

    def _background_room(self, guarded: bool) -> BackgroundRoom:
        """What this plan leaves batch prompts: the slots under `max_background` that
        background rows do not hold, and whether any interactive stream still makes its
        first chunk (one pass over the running rows, made only when batch work waits)."""
        rows = starting = 0
        for seq in self.running.values():
            if seq.background:
                rows += 1
            elif seq.chunks == 0:
                starting += 1
        return BackgroundRoom(
            slots=self.max_background - rows, starting=starting > 0, guarded=guarded
        )

    def _admit_kv(self, seq: S) -> bool:
        """Blocks for a newcomer's prompt, if they are free beyond the watermark."""
        if self.kv is None:
            return True
        if not self.kv.can_admit(seq.prompt_length):
            return False
        self.kv.fit(seq.kv_blocks, seq.prompt_length)
        return True

    def _fit_kv(self, seq: S, positions: int, grow_only: bool = False) -> bool:
        """Give `seq` the blocks for `positions` (False: too few are free)."""
        if self.kv is None:
            return True
        before = len(seq.kv_blocks)
        fit = self.kv.grow if grow_only else self.kv.fit
        if not fit(seq.kv_blocks, positions):
            return False
        if len(seq.kv_blocks) != before:
            self._kv_changed[seq.slot] = seq
        return True

    def take_kv_changes(self) -> list[tuple[int, list[int]]]:
        """(slot, blocks) of every slot whose blocks changed since the last call,
        for the engine to mirror into the device block table."""
        changed, self._kv_changed = self._kv_changed, {}
        return [(slot, list(seq.kv_blocks)) for slot, seq in changed.items()]

    def release_kv(self, seq: S) -> None:
        """Return a finished sequence's blocks; call only once its slot's device
        row no longer names them (released, or taken by another sequence)."""
        if self.kv is not None:
            self.kv.release(seq.kv_blocks)

    def kv_deadlock(self) -> S | None:
        """After step_rows: when every occupied row is stalled for want of a KV
        block, nobody can finish and give one back; the youngest of them is the
        one to end (the others have more of their audio out)."""
        occupied = [seq for seq in self.running.values() if not seq.finished]
        if occupied and len(self.kv_stalled) == len(occupied):
            return self.kv_stalled[-1]  # `running` keeps the order slots were taken
        return None

    def step_rows(self) -> tuple[list[S], int, int]:
        """The decode step's shape: (the rows it advances, the batch extent,
        the live KV length). The rows are the runnable ones that hold (or now
        get) the KV block of the position they write; the others are stalled
        (`kv_stalled`: for want of a block). Stalled rows stay in the batch and
        write past their live length, so they count for the KV length too."""
        occupied = [seq for seq in self.running.values() if not seq.finished]
        self.kv_stalled = []
        if not occupied:
            return [], 0, 0
        extent = max(seq.slot for seq in occupied) + 1
        live = max(seq.position + 1 for seq in occupied)
        rows = []
        for seq in occupied:
            if not seq.runnable:
                continue
            # The step writes position `position`: its block must be the row's own.
            if self._fit_kv(seq, seq.position + 1, grow_only=True):
                rows.append(seq)
            else:
                self.kv_stalled.append(seq)
        return rows, extent, live

    def postprocess(
        self, stepped: list[Sequence], codes: np.ndarray, nxt: np.ndarray, rules: StepRules
    ) -> StepOutcome:
        """Apply one decode step's output to the rows it advanced: `codes`
        [batch, groups] are the frames made, `nxt` [batch] the next frames'
        first codes. The sequences whose rules end them are finished here, as
        are those whose bookkeeping raises ("error"); their ends follow their
        last chunks (`take_ends`)."""
        out = StepOutcome(chunks=[], finished=[], next_piece=[], failed=[], frames=0)
        for seq in stepped:
            if seq.finished:  # cancelled while the step ran
                continue
            try:
                self._apply_frame(seq, codes[seq.slot].copy(), int(nxt[seq.slot]), rules, out)
            except Exception as exc:  # one row's bookkeeping must not stop the others'
                out.failed.append((seq, exc))
        for seq, reason in out.finished:
            self.finish(seq, reason)
        for seq, exc in out.failed:
            self.finish(seq, "error", failure("generation failed", exc))
        return out

    def _apply_frame(
        self, seq: Sequence, frame: np.ndarray, next_code: int, rules: StepRules, out: StepOutcome
    ) -> None:
        clock = seq.word_clock
        if clock is not None:  # the text this frame was conditioned on (word_timing.py)
            clock.frame_made(seq.piece_frames, seq.frames, seq.text)
        seq.pending.append(frame)
        if seq.all_codes is not None:  # kept for tests and debugging only
            seq.all_codes.append(frame)
        seq.frames += 1
        seq.piece_frames += 1
        seq.position += 1
        out.frames += 1
        said_eos = next_code == rules.eos_id
        reason: FinishReason | None = None
        if said_eos and not seq.later_pieces:
            reason = "eos"
        elif seq.frames >= seq.params.max_frames:
            reason = "length"
        elif said_eos:
            # The piece is spoken; the next one continues the same stream.
            if clock is not None:
                clock.piece_ended(seq.frames)
            seq.start_next_piece()
            if clock is not None:
                clock.next_piece(seq.piece)
            self.refill.append(seq)
            out.next_piece.append(seq)
        elif seq.position + 1 >= rules.max_len:
            reason = "length"
        if reason is not None and clock is not None:
            clock.piece_ended(seq.frames)
        if reason is not None or len(seq.pending) >= rules.chunk_limit(seq.chunks, seq.background):
            words = clock.take() if clock is not None else ()
            out.chunks.append(
                Chunk(seq, np.stack(seq.pending), seq.chunks, last=reason is not None, words=words)
            )
            seq.chunks += 1
            seq.pending = []
        if reason is not None:
            out.finished.append((seq, reason))

    def remove(self, seq: S, held_seconds: float | None = None) -> int | None:
        """Take `seq` out of the queue or its slot; returns the freed slot."""
        if seq in self.refill:
            self.refill.remove(seq)
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


def failure(what: str, exc: BaseException) -> EngineError:
    """A sequence's error for a failure `exc` of its own: the message keeps
    `exc`'s (the server names a CUDA OOM by it) and `exc` is its cause."""
    if isinstance(exc, EngineError):
        return exc
    error = EngineError(f"{what}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def end_with_error(scheduler: Scheduler, seq: Sequence, what: str, exc: BaseException) -> None:
    """A failure of `seq`'s own (`what` failed with `exc`): logged once with its request
    id and traceback, then `seq` ends with "error" and the failure as its error. The one
    rule for every phase that ends a request it cannot serve (taking its text, its
    prefill, a decode step it makes fail); the caller holds the engine's lock."""
    log.error("%s; ending the request", what, exc_info=exc, extra={"request_id": seq.request_id})
    scheduler.finish(seq, "error", failure(what, exc))
