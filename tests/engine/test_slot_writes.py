"""The runner's writes to several slots in one call (`release`, `set_texts`): each
slot ends as a call of its own leaves it, and the slots not named are untouched.
The engine makes them once an iteration for all its finished streams and all its
newcomers' texts: a call per slot cost the engine thread torch calls, each handing
the interpreter lock over."""

from __future__ import annotations

import asyncio

import pytest
import torch

from support.engine_requests import collect, request
from ttsfleet_runtime.engine.kv_blocks import SCRATCH_BLOCK
from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.model.weights import load_model

SLOTS = 6


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint, "cpu", "float32", max_positions=128)


def busy_runner(model) -> ModelRunner:
    """A runner whose every slot holds blocks, a position, a frame and text."""
    runner = ModelRunner(
        model, max_batch=SLOTS, max_len=128, max_text=16, device="cpu", cuda_graphs=False
    )
    s = runner.state
    per_slot = runner.cache.host_table.shape[1]
    for slot in range(SLOTS):
        runner.set_blocks(slot, [1 + slot * per_slot + j for j in range(per_slot)])
        s.position[slot], s.frame[slot] = 40 + slot, 7 + slot
        s.text_ids[slot] = torch.arange(16) + 100 * slot
        s.text_len[slot] = 5 + slot
    return runner


def state_of(runner: ModelRunner) -> dict[str, torch.Tensor]:
    s = runner.state
    tensors = {n: t.clone() for n, t in vars(s).items() if isinstance(t, torch.Tensor)}
    return tensors | {"block_table": runner.cache.host_table.clone()}


def assert_same_state(a: ModelRunner, b: ModelRunner) -> None:
    mine, theirs = state_of(a), state_of(b)
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), name


def test_releasing_slots_together_leaves_each_as_releasing_it_alone(model):
    alone, together = busy_runner(model), busy_runner(model)
    for slot in (4, 1, 2):
        alone.release(slot)
    together.release(4, 1, 2)
    assert_same_state(together, alone)
    s = together.state
    for slot in (1, 2, 4):
        assert (s.position[slot], s.frame[slot], s.text_len[slot]) == (0, 0, 0)
        assert together.cache.host_table[slot].eq(SCRATCH_BLOCK).all()
    untouched = busy_runner(model)
    for slot in (0, 3, 5):
        assert s.position[slot] == 40 + slot and s.text_len[slot] == 5 + slot
        assert torch.equal(together.cache.host_table[slot], untouched.cache.host_table[slot])


def test_releasing_no_slot_or_one_twice_is_harmless(model):
    runner, reference = busy_runner(model), busy_runner(model)
    runner.release()
    assert_same_state(runner, reference)
    runner.release(3, 3)
    reference.release(3)
    assert_same_state(runner, reference)


def test_texts_of_several_slots_in_one_call_are_those_of_a_call_per_slot(model):
    texts = [(2, [11, 12, 13], 0), (0, [21], 5), (5, [31, 32], 14), (3, [], 4)]
    alone, together = busy_runner(model), busy_runner(model)
    for slot, ids, start in texts:
        alone.set_text(slot, ids, start)
    together.set_texts(texts)
    assert_same_state(together, alone)
    s = together.state
    assert s.text_ids[2, :4].tolist() == [11, 12, 13, 203]  # past the new ids: as it was
    assert s.text_ids[5, 13:].tolist() == [513, 31, 32]
    assert [s.text_len[slot].item() for slot in (2, 0, 5, 3, 1)] == [3, 6, 16, 4, 6]


def test_a_call_with_a_text_too_long_or_a_slot_twice_writes_nothing(model):
    runner, reference = busy_runner(model), busy_runner(model)
    with pytest.raises(ValueError, match="longer than 16"):
        runner.set_texts([(1, [5, 6], 0), (2, [7, 8], 15)])
    with pytest.raises(ValueError, match="named twice"):
        runner.set_texts([(1, [5], 0), (1, [6], 1)])
    assert_same_state(runner, reference)


async def test_the_newcomers_of_one_prefill_get_their_texts_in_one_call(make_engine):
    engine = await make_engine(max_batch=4)
    calls: list[list[int]] = []
    set_texts = engine.runner.set_texts

    def recording(texts):
        calls.append(sorted(slot for slot, _, _ in texts))
        return set_texts(texts)

    engine.runner.set_texts = recording
    with engine.core.lock:  # the engine thread plans once all have arrived
        streams = [engine.submit(request(frames=4, seed=s)) for s in (1, 2, 3)]
    await asyncio.gather(*(collect(s) for s in streams))
    assert all(s.finish_reason == "length" for s in streams)
    assert calls == [sorted(s.seq.slot for s in streams)]  # whole texts: nothing later
