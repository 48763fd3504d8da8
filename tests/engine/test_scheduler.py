"""The scheduler alone (no torch): queue bound, slots, order of admission, and
the post-step rules (stops, chunk boundaries, long-text pieces)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ttsfleet_runtime.engine.api import SamplingParams
from ttsfleet_runtime.engine.scheduler import (
    BACKGROUND_PREFILL_TOKENS,
    GUARDED_PREFILL_TOKENS,
    LEAD_GUARD_S,
    QueueFullError,
    Scheduler,
    StepRules,
)
from ttsfleet_runtime.engine.sequence import Sequence, Status, TextFeed


@dataclasses.dataclass(eq=False)
class Seq:
    name: str
    ready_for_prefill: bool = True
    runnable: bool = True
    slot: int | None = None
    position: int = 0
    finished: bool = False
    prompt_length: int = 10
    background: bool = False
    chunks: int = 0


def make(max_batch: int, max_queue: int, prompts: int = 64, tokens: int = 1024) -> Scheduler:
    """A scheduler whose packed prefill takes `prompts` prompts of `tokens` positions."""
    return Scheduler(max_batch, max_queue, max_prefill_prompts=prompts, max_prefill_tokens=tokens)


def test_admission_beyond_the_queue_bound_is_refused_with_a_hint():
    s = make(max_batch=2, max_queue=2)
    s.admit(Seq("a"))
    s.admit(Seq("b"))
    with pytest.raises(QueueFullError) as e:
        s.admit(Seq("c"))
    assert e.value.retry_after_s > 0
    assert [q.name for q in s.waiting] == ["a", "b"]


def test_batch_rows_never_fill_the_engine_an_interactive_arrival_is_admitted_next_plan():
    s = Scheduler(4, 2, max_prefill_prompts=64, max_prefill_tokens=1024, max_background=3)
    batch = [Seq(f"batch{i}", background=True) for i in range(6)]
    for q in batch:
        s.add(q)
    assert [q.name for q in s.plan().prefill] == ["batch0", "batch1", "batch2"]
    assert s.plan().prefill == []  # the bound: one slot stays free
    caller = Seq("caller")
    s.admit(caller)
    assert [(q.name, q.slot) for q in s.plan().prefill] == [("caller", 3)]


def test_batch_rows_wait_while_an_interactive_request_waits_for_a_slot():
    s = Scheduler(2, 8, max_prefill_prompts=64, max_prefill_tokens=1024, max_background=2)
    s.admit(Seq("a"))
    s.add(Seq("batch", background=True))
    s.admit(Seq("b"))
    s.admit(Seq("c"))
    # "batch" arrived before b and c, yet they go first; it waits for room nobody wants.
    assert [q.name for q in s.plan().prefill] == ["a", "b"]
    s.remove(s.running[0])
    assert [q.name for q in s.plan().prefill] == ["c"]
    s.running[0].chunks = 1  # c's first audio is out
    s.remove(s.running[1])
    assert [q.name for q in s.plan().prefill] == ["batch"]


def test_batch_rows_wait_while_an_interactive_stream_makes_its_first_chunk():
    s = make(max_batch=8, max_queue=8)
    caller = Seq("caller")
    s.admit(caller)
    s.add(Seq("batch", background=True))
    # The caller's prefill goes alone, and the iterations up to its first chunk carry
    # no batch prefill either: they are its time to first audio.
    assert [q.name for q in s.plan().prefill] == ["caller"]
    assert s.plan().prefill == []
    caller.chunks = 1
    assert [q.name for q in s.plan().prefill] == ["batch"]


def test_batch_rows_wait_while_a_playing_stream_is_short_of_lead():
    s = make(max_batch=8, max_queue=8)
    s.add(Seq("batch", background=True))
    assert s.plan(spare_s=LEAD_GUARD_S / 2).prefill == []
    assert [q.name for q in s.plan(spare_s=LEAD_GUARD_S * 2).prefill] == ["batch"]


def test_an_iteration_prefills_a_few_batch_prompts_at_most():
    s = make(max_batch=64, max_queue=64)
    length = BACKGROUND_PREFILL_TOKENS // 4
    for i in range(10):
        s.add(Seq(f"batch{i}", background=True, prompt_length=length))
    assert len(s.plan().prefill) == 4
    assert len(s.plan().prefill) == 4
    # One prompt longer than the whole allowance still goes, alone.
    s = make(max_batch=64, max_queue=64)
    s.add(Seq("long", background=True, prompt_length=BACKGROUND_PREFILL_TOKENS * 3))
    s.add(Seq("short", background=True))
    assert [q.name for q in s.plan().prefill] == ["long"]


def test_waiting_batch_rows_do_not_count_against_the_interactive_queue_bound():
    s = make(max_batch=1, max_queue=1)
    for i in range(5):
        s.add(Seq(f"batch{i}", background=True))
    s.admit(Seq("caller"))  # would be a 429 if the batch rows counted
    with pytest.raises(QueueFullError):
        s.admit(Seq("second caller"))


def test_waiting_requests_take_the_lowest_free_slots_in_arrival_order():
    s = make(max_batch=3, max_queue=8)
    seqs = [Seq(n) for n in "abcd"]
    for q in seqs:
        s.admit(q)
    plan = s.plan()
    assert [(q.name, q.slot) for q in plan.prefill] == [("a", 0), ("b", 1), ("c", 2)]
    assert [q.name for q in s.waiting] == ["d"]
    s.remove(seqs[1])
    plan = s.plan()
    assert [(q.name, q.slot) for q in plan.prefill] == [("d", 1)]
    assert {q.slot: q.name for q in s.step_rows()[0]} == {0: "a", 1: "d", 2: "c"}


def test_a_request_still_waiting_for_text_lets_later_ones_pass():
    s = make(max_batch=1, max_queue=8)
    silent, ready = Seq("silent", ready_for_prefill=False), Seq("ready")
    s.admit(silent)
    s.admit(ready)
    assert [q.name for q in s.plan().prefill] == ["ready"]
    assert list(s.waiting) == [silent]


def test_everything_ready_is_prefilled_together_up_to_the_call_limits():
    s = make(max_batch=16, max_queue=16, prompts=3, tokens=1024)
    for n in "abcde":
        s.admit(Seq(n))
    assert [q.name for q in s.plan().prefill] == ["a", "b", "c"]
    assert [q.name for q in s.plan().prefill] == ["d", "e"]
    s = make(max_batch=16, max_queue=16, prompts=64, tokens=100)
    for n, length in zip("abcd", (40, 40, 30, 10), strict=True):
        s.admit(Seq(n, prompt_length=length))
    # c does not fit beside a and b: it waits, and d (which would fit) does not overtake it.
    assert [q.name for q in s.plan().prefill] == ["a", "b"]
    assert [q.name for q in s.plan().prefill] == ["c", "d"]
    assert s.batch_extent == 4


def test_a_next_piece_goes_first_and_newcomers_wait_while_one_does_not_fit():
    s = make(max_batch=4, max_queue=8, prompts=2)
    pieces = [Seq(n, slot=i) for i, n in enumerate("pqr")]
    for q in pieces:
        s.running[q.slot] = q
        s.refill.append(q)
    s.admit(Seq("new"))
    assert [q.name for q in s.plan().prefill] == ["p", "q"]
    assert [q.name for q in s.plan().prefill] == ["r", "new"]


def test_a_stream_about_to_run_dry_limits_the_prefill_so_the_step_comes_sooner():
    def burst():
        s = make(max_batch=64, max_queue=64)
        for i in range(20):
            s.admit(Seq(f"n{i}", prompt_length=10))
        return s

    relaxed = burst().plan(spare_s=LEAD_GUARD_S + 0.5)
    assert len(relaxed.prefill) == 20 and not relaxed.deferred
    assert len(burst().plan(spare_s=None).prefill) == 20  # nobody playing yet
    guarded = burst().plan(spare_s=LEAD_GUARD_S / 2)
    assert len(guarded.prefill) == GUARDED_PREFILL_TOKENS // 10 and guarded.deferred
    # Even under the guard one prompt goes, however long: nobody waits forever.
    s = make(max_batch=4, max_queue=4)
    s.admit(Seq("long", prompt_length=GUARDED_PREFILL_TOKENS * 4))
    s.admit(Seq("next"))
    plan = s.plan(spare_s=-1.0)
    assert [q.name for q in plan.prefill] == ["long"] and plan.deferred


def test_removing_a_waiting_request_frees_no_slot():
    s = make(max_batch=1, max_queue=8)
    q = Seq("a")
    s.admit(q)
    assert s.remove(q) is None and not s.waiting


# ---------------------------------------------------------------- after a step
EOS = 9
RULES = StepRules(eos_id=EOS, max_len=100, first_chunk_frames=2, chunk_frames=3)


def running(slot: int, max_frames: int = 50, later_pieces=(), position: int = 10) -> Sequence:
    seq = Sequence(
        f"r{slot}",
        SamplingParams(max_frames=max_frames),
        seed=1,
        voice=None,
        text=TextFeed(str.split, "some words"),
        stream=None,
        later_pieces=list(later_pieces),
        prompt_length=10,
    )
    seq.slot, seq.position, seq.awaiting_prefill = slot, position, False
    seq.text_final = True  # all its text is in the runner
    return seq


def step(scheduler, seqs, nxt_by_slot=None, rules=RULES):
    """Postprocess one step in which every seq made frame [slot]*16."""
    extent = max(s.slot for s in seqs) + 1
    codes = np.repeat(np.arange(extent)[:, None], 16, axis=1)
    nxt = np.zeros(extent, dtype=np.int64)
    for slot, code in (nxt_by_slot or {}).items():
        nxt[slot] = code
    return scheduler.postprocess(seqs, codes, nxt, rules)


def test_frames_become_chunks_that_ramp_from_the_first_chunk_to_chunk_frames():
    s = make(max_batch=2, max_queue=2)
    seq = running(0)
    sizes = []
    for _ in range(10):
        sizes += [len(c.codes) for c in step(s, [seq]).chunks]
    assert sizes == [2, 2, 3, 3]
    assert seq.frames == 10 and seq.position == 20 and seq.chunks == 4


def test_each_chunk_is_as_long_as_the_audio_before_it_up_to_chunk_frames():
    rules = StepRules(eos_id=EOS, max_len=100, first_chunk_frames=2, chunk_frames=16)
    assert [rules.chunk_limit(i) for i in range(7)] == [2, 2, 4, 8, 16, 16, 16]
    assert rules.chunk_sizes() == (2, 4, 8, 16)
    assert rules.chunk_limit(10_000) == 16
    one = StepRules(eos_id=EOS, max_len=100, first_chunk_frames=1, chunk_frames=6)
    assert [one.chunk_limit(i) for i in range(6)] == [1, 1, 2, 4, 6, 6]
    assert one.chunk_sizes() == (1, 2, 4, 6)
    flat = StepRules(eos_id=EOS, max_len=100, first_chunk_frames=8, chunk_frames=4)
    assert [flat.chunk_limit(i) for i in range(3)] == [8, 4, 4]
    assert flat.chunk_sizes() == (4, 8)


def test_batch_work_makes_steady_chunks_from_the_first():
    rules = StepRules(eos_id=EOS, max_len=100, first_chunk_frames=2, chunk_frames=8)
    assert [rules.chunk_limit(i, background=True) for i in range(3)] == [8, 8, 8]
    s = make(max_batch=2, max_queue=2)
    seq = running(0)
    seq.background = True
    sizes = []
    for _ in range(16):
        sizes += [len(c.codes) for c in step(s, [seq], rules=rules).chunks]
    assert sizes == [8, 8]


def test_eos_ends_the_sequence_with_its_pending_frames_as_the_last_chunk():
    s = make(max_batch=2, max_queue=2)
    seq = running(1)
    step(s, [seq])
    out = step(s, [seq], {1: EOS})
    assert out.finished == [(seq, "eos")]
    assert [(len(c.codes), c.index, c.last) for c in out.chunks] == [(2, 0, True)]


def test_max_frames_and_a_full_kv_cache_end_with_length():
    s = make(max_batch=2, max_queue=2)
    by_frames, by_cache = running(0, max_frames=1), running(1, position=RULES.max_len - 2)
    out = step(s, [by_frames, by_cache])
    assert out.finished == [(by_frames, "length"), (by_cache, "length")]
    assert all(c.last for c in out.chunks)


def test_eos_with_text_left_moves_to_the_next_piece_in_the_same_slot():
    s = make(max_batch=2, max_queue=2)
    seq = running(0, later_pieces=["second piece", "third"])
    step(s, [seq])
    out = step(s, [seq], {0: EOS})
    assert out.finished == [] and out.next_piece == [seq]
    assert seq.text.refresh() and seq.text.ids == ["second", "piece"]
    assert seq.piece == 1 and seq.awaiting_prefill
    assert not seq.runnable and seq.piece_frames == 0 and seq.frames == 2
    assert s.plan().prefill == [seq]  # prefilled again before any newcomer
    assert seq.piece_seed != seq.seed


def test_the_request_frame_budget_spans_its_pieces():
    s = make(max_batch=2, max_queue=2)
    seq = running(0, max_frames=2, later_pieces=["more text"])
    step(s, [seq])
    out = step(s, [seq], {0: EOS})
    assert out.finished == [(seq, "length")] and out.next_piece == []


def test_a_sequence_cancelled_during_the_step_is_left_alone():
    s = make(max_batch=2, max_queue=2)
    seq = running(0)
    seq.status = Status.FINISHED
    out = step(s, [seq])
    assert out.chunks == [] and out.frames == 0 and seq.frames == 0


def test_step_rows_are_the_runnable_ones_and_the_kv_length_covers_all():
    s = make(max_batch=4, max_queue=2)
    a, b = running(0, position=5), running(2, position=30)
    b.text = TextFeed(str.split)  # streamed text, nothing handed over yet: stalled
    b.text_final = False
    s.running = {0: a, 2: b}
    rows, extent, live = s.step_rows()
    assert rows == [a] and extent == 3 and live == 31


def test_a_row_whose_bookkeeping_raises_is_reported_and_the_others_go_on():
    s = make(max_batch=2, max_queue=2)
    broken, fine = running(0), running(1)
    broken.pending = None  # appending to it raises
    out = step(s, [broken, fine])
    assert [(seq, type(exc)) for seq, exc in out.failed] == [(broken, AttributeError)]
    assert fine.frames == 1 and out.frames == 1


def test_a_sequence_cancelled_between_pieces_is_not_prefilled_again():
    s = make(max_batch=2, max_queue=2)
    seq = running(0, later_pieces=["next piece"])
    s.running[0] = seq
    step(s, [seq], {0: EOS})
    assert s.remove(seq) == 0
    assert s.plan().prefill == [] and not s.running
