"""The scheduler alone (no torch): queue bound, slots, order of admission."""

from __future__ import annotations

import dataclasses

import pytest

from ttsfleet_runtime.engine.scheduler import QueueFullError, Scheduler


@dataclasses.dataclass(eq=False)
class Seq:
    name: str
    ready_for_prefill: bool = True
    runnable: bool = True
    slot: int | None = None
    position: int = 0
    finished: bool = False


def test_admission_beyond_the_queue_bound_is_refused_with_a_hint():
    s = Scheduler(max_batch=2, max_queue=2)
    s.admit(Seq("a"))
    s.admit(Seq("b"))
    with pytest.raises(QueueFullError) as e:
        s.admit(Seq("c"))
    assert e.value.retry_after_s > 0
    assert [q.name for q in s.waiting] == ["a", "b"]


def test_waiting_requests_take_the_lowest_free_slots_in_arrival_order():
    s = Scheduler(max_batch=3, max_queue=8)
    seqs = [Seq(n) for n in "abcd"]
    for q in seqs:
        s.admit(q)
    plan = s.plan()
    assert [(q.name, q.slot) for q in plan.prefill] == [("a", 0), ("b", 1), ("c", 2)]
    assert [q.name for q in s.waiting] == ["d"]
    s.remove(seqs[1])
    plan = s.plan()
    assert [(q.name, q.slot) for q in plan.prefill] == [("d", 1)]
    assert [q.name for q in plan.decode] == ["a", "d", "c"]


def test_a_request_still_waiting_for_text_lets_later_ones_pass():
    s = Scheduler(max_batch=1, max_queue=8)
    silent, ready = Seq("silent", ready_for_prefill=False), Seq("ready")
    s.admit(silent)
    s.admit(ready)
    assert [q.name for q in s.plan().prefill] == ["ready"]
    assert list(s.waiting) == [silent]


def test_prefills_per_step_are_capped_so_running_streams_keep_pace():
    s = Scheduler(max_batch=8, max_queue=8, max_prefills_per_step=2)
    for n in "abcde":
        s.admit(Seq(n))
    assert len(s.plan().prefill) == 2
    assert len(s.plan().prefill) == 2
    assert s.batch_extent == 4


def test_removing_a_waiting_request_frees_no_slot():
    s = Scheduler(max_batch=1, max_queue=8)
    q = Seq("a")
    s.admit(q)
    assert s.remove(q) is None and not s.waiting
