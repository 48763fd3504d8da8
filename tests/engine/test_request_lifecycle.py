"""A request's whole life through the scheduler's contract, with no torch: the
commands other threads send (add, abort, pause/resume, a codec failure) applied by the inbox,
the plan, the prefill, the decode steps' output, the ends the engine hands to the
codec worker and the streams, and the release of the slot and its KV blocks.

Every status change goes through the scheduler; the engine only carries out what
it returns. These tests are that contract: the engine thread (engine_core.py)
does no more than call these methods in this order around the device work."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from ttsfleet_runtime.engine.api import SamplingParams
from ttsfleet_runtime.engine.commands import CodecFailed, Inbox
from ttsfleet_runtime.engine.kv_blocks import KVBlocks
from ttsfleet_runtime.engine.scheduler import End, QueueFullError, Scheduler, StepRules
from ttsfleet_runtime.engine.sequence import Sequence, Status, TextFeed

EOS = 9
RULES = StepRules(eos_id=EOS, max_len=100, first_chunk_frames=2, chunk_frames=4)
BLOCK = 4  # KV positions per block
PROMPT = 6  # positions of every prompt here: 2 blocks


class Engine:
    """What the engine thread does with the scheduler, minus the device: the
    calls in engine_core's order, each step making frame code `slot` for every row."""

    def __init__(self, max_batch: int = 2, max_queue: int = 4, blocks: int = 32):
        self.scheduler: Scheduler[Sequence] = Scheduler(
            max_batch, max_queue, max_prefill_prompts=8, max_prefill_tokens=64
        )
        self.scheduler.kv = KVBlocks(blocks, BLOCK)
        self.inbox = Inbox(self.scheduler, threading.RLock())
        self.reset_slots: list[int] = []  # device rows the engine was told to reset
        self.ends: list[End] = []  # handed to the codec worker, in order

    def drain(self) -> None:
        self.inbox.drain()
        self.hand_over_ends()

    def hand_over_ends(self) -> None:
        self.ends += self.scheduler.take_ends()

    def release(self) -> None:
        releases = self.scheduler.take_releases()
        if releases is not None:
            self.reset_slots += releases.slots
            self.scheduler.free(releases)

    def plan_and_prefill(self) -> list[Sequence]:
        planned = self.scheduler.plan().prefill
        for seq in planned:
            if self.scheduler.prefilled(seq, PROMPT):
                # Its text is whole: the engine hands the runner all of it, its end too.
                self.scheduler.text_handed(seq, len(seq.text.ids), final=True)
        return planned

    def step(self, next_codes: dict[str, int] | None = None):
        rows, extent, _ = self.scheduler.step_rows()
        if not rows:
            return None
        codes = np.repeat(np.arange(extent)[:, None], 16, axis=1)
        nxt = np.zeros(extent, dtype=np.int64)
        for seq in rows:
            nxt[seq.slot] = (next_codes or {}).get(seq.request_id, 0)
        outcome = self.scheduler.postprocess(rows, codes, nxt, RULES)
        self.hand_over_ends()  # after the step's chunks, as the engine does
        return outcome

    def iteration(self, next_codes: dict[str, int] | None = None):
        self.drain()
        self.release()
        self.plan_and_prefill()
        return self.step(next_codes)


def sequence(name: str, frames: int = 50, later_pieces=()) -> Sequence:
    voice = SimpleNamespace(ref_text_ids=[], prompt_text_ids=1)
    seq = Sequence(
        name,
        SamplingParams(max_frames=frames),
        seed=1,
        voice=voice,
        text=TextFeed(str.split, "some words"),
        stream=None,
        later_pieces=list(later_pieces),
        prompt_length=PROMPT,
    )
    seq.text.refresh()
    return seq


def test_a_request_lives_from_add_to_release():
    engine = Engine()
    seq = sequence("a")
    engine.inbox.add(seq)
    assert engine.inbox.counts() == (1, 0)  # waiting before the engine thread drains
    assert seq.status is Status.WAITING and seq.slot is None

    assert engine.iteration() is not None  # drained, planned, prefilled, stepped
    assert seq.status is Status.RUNNING and seq.slot == 0
    assert engine.inbox.counts() == (0, 1)
    chunks = [len(c.codes) for c in engine.step().chunks]  # the first chunk: 2 frames
    assert chunks == [2]

    outcome = engine.iteration({"a": EOS})
    assert [(len(c.codes), c.last) for c in outcome.chunks] == [(1, True)]
    assert outcome.finished == [(seq, "eos")]
    # The scheduler finished it itself: its end follows its last chunk.
    assert seq.status is Status.FINISHED and seq.finish_reason == "eos"
    assert engine.ends == [End(seq, "eos")]
    assert engine.scheduler.running == {} and engine.inbox.counts() == (0, 0)
    assert engine.scheduler.kv.used > 0  # its device row still names its blocks

    engine.iteration()
    assert engine.reset_slots == [0] and engine.scheduler.kv.used == 0


def test_a_streamed_text_steps_only_as_far_as_its_text_is_handed():
    engine = Engine()
    seq = sequence("a")
    engine.inbox.add(seq)
    engine.drain()
    engine.scheduler.plan()
    engine.scheduler.prefilled(seq, PROMPT)
    engine.scheduler.text_handed(seq, 2, final=False)  # two trailing ids so far
    assert engine.step().frames == 1 and engine.step().frames == 1
    assert engine.step() is None  # frame 2 needs a third id: the row waits
    engine.scheduler.text_handed(seq, 0, final=True)  # the text ended
    assert engine.step().frames == 1 and seq.frames == 3


def test_an_abort_while_waiting_ends_it_without_a_slot():
    engine = Engine(max_batch=1)
    running, waiting = sequence("running"), sequence("waiting")
    engine.inbox.add(running)
    engine.iteration()
    engine.inbox.add(waiting)
    engine.inbox.abort(waiting, "cancelled")
    assert engine.inbox.counts() == (0, 1)  # the cancel counts at once

    engine.iteration()
    assert waiting.finished and waiting.slot is None
    assert engine.ends == [End(waiting, "cancelled")]
    assert engine.reset_slots == [] and list(engine.scheduler.waiting) == []


def test_an_abort_after_the_plan_and_before_the_prefill_frees_the_slot():
    engine = Engine()
    seq = sequence("a")
    engine.inbox.add(seq)
    engine.drain()
    planned = engine.scheduler.plan().prefill
    assert planned == [seq] and seq.slot == 0
    engine.inbox.abort(seq, "cancelled")  # arrives while the prefill runs
    engine.drain()
    assert engine.scheduler.prefilled(seq, PROMPT) is False  # it stays finished
    assert seq.status is Status.FINISHED
    engine.release()
    assert engine.reset_slots == [0] and engine.scheduler.kv.used == 0
    assert engine.ends == [End(seq, "cancelled")]


def test_an_abort_while_a_step_runs_takes_none_of_its_frames():
    engine = Engine()
    seq = sequence("a")
    engine.inbox.add(seq)
    engine.iteration()
    rows, extent, _ = engine.scheduler.step_rows()  # a step launched over it
    engine.inbox.abort(seq, "cancelled")
    engine.drain()  # the next iteration's top, before the step's codes are applied
    outcome = engine.scheduler.postprocess(
        rows, np.zeros((extent, 16), np.int64), np.zeros(extent, np.int64), RULES
    )
    assert outcome.chunks == [] and outcome.frames == 0
    assert seq.frames == 1 and engine.ends == [End(seq, "cancelled")]
    engine.release()
    assert engine.reset_slots == [0] and engine.scheduler.kv.used == 0


def test_an_abort_between_pieces_is_not_prefilled_again():
    engine = Engine()
    seq = sequence("a", later_pieces=["next piece"])
    engine.inbox.add(seq)
    engine.iteration()
    outcome = engine.step({"a": EOS})
    assert outcome.next_piece == [seq] and seq.awaiting_prefill
    engine.inbox.abort(seq, "cancelled")
    engine.drain()
    assert engine.scheduler.plan().prefill == [] and not engine.scheduler.refill
    assert engine.ends == [End(seq, "cancelled")]


def test_a_codec_failure_ends_only_its_request():
    engine = Engine()
    victim, bystander = sequence("victim"), sequence("bystander")
    engine.inbox.add(victim)
    engine.inbox.add(bystander)
    engine.iteration()
    engine.step()  # both chunks go to the codec worker; the victim's decode fails
    engine.inbox.send(CodecFailed(victim.key))
    engine.inbox.send(CodecFailed(victim.key))  # a second report changes nothing
    outcome = engine.iteration()
    assert victim.finish_reason == "error" and engine.ends == [End(victim, "error")]
    assert [row.request_id for row in engine.scheduler.running.values()] == ["bystander"]
    assert outcome.frames == 1  # only the bystander stepped
    assert engine.reset_slots == [victim.slot]


def test_the_queue_bound_counts_requests_on_their_way():
    engine = Engine(max_batch=1, max_queue=2)
    engine.inbox.add(sequence("a"))
    engine.inbox.add(sequence("b"))
    with pytest.raises(QueueFullError):
        engine.inbox.add(sequence("c"))
    engine.drain()
    with pytest.raises(QueueFullError):  # still two waiting, now in the scheduler
        engine.inbox.check_room()


def test_shutdown_ends_every_request_once():
    engine = Engine(max_batch=1)
    running, waiting = sequence("running", frames=2), sequence("waiting")
    engine.inbox.add(running)
    engine.inbox.add(waiting)
    engine.iteration()
    engine.step()  # `running` reaches max_frames: finished by its rules
    engine.inbox.abort(None, "shutdown")
    engine.drain()
    assert engine.ends == [End(running, "length"), End(waiting, "shutdown")]
    assert running.finish_reason == "length"


def test_the_contract_needs_no_torch():
    code = (
        "import sys, ttsfleet_runtime.engine.commands, ttsfleet_runtime.engine.scheduler; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_paused_request_keeps_its_slot_and_makes_no_frames_until_resumed():
    # Backpressure: its stream sends Pause when its caller is a buffer behind.
    engine = Engine(max_batch=2)
    behind, keeping_up = sequence("behind"), sequence("keeping-up")
    engine.inbox.add(behind)
    engine.inbox.add(keeping_up)
    engine.iteration()
    frames = behind.frames

    engine.inbox.pace(behind, paused=True)
    assert not behind.paused  # a command: nothing changes before the engine thread drains
    for _ in range(3):
        outcome = engine.iteration()
        assert [c.seq for c in outcome.chunks if c.seq is behind] == []
    assert behind.frames == frames and behind.slot == 0 and not behind.finished
    assert keeping_up.frames == frames + 3  # the rest of the batch steps on
    assert engine.inbox.paused() == 1 and engine.inbox.counts() == (0, 2)

    engine.inbox.pace(behind, paused=False)
    engine.iteration()
    assert behind.frames == frames + 1 and engine.inbox.paused() == 0


def test_a_paused_request_that_is_cancelled_stops_counting_as_paused_at_once():
    engine = Engine()
    seq = sequence("a")
    engine.inbox.add(seq)
    engine.iteration()
    engine.inbox.pace(seq, paused=True)
    engine.iteration()
    assert engine.inbox.paused() == 1

    engine.inbox.abort(seq, "cancelled")  # the send timeout cut its client
    assert engine.inbox.paused() == 0 and engine.inbox.counts() == (0, 0)
    engine.iteration()
    assert engine.ends == [End(seq, "cancelled")]
    engine.inbox.pace(seq, paused=False)  # a resume after the end changes nothing
    engine.iteration()
    assert seq.finished
