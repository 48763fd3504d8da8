"""Packed prefill: the prompts admitted together run in one call, and each
one's first code, keys/values and every frame decoded after are those of a
prefill of that prompt alone (counter-based sampling, block-diagonal causal
attention, positions restarting per prompt). Float32 on the CPU."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from support.engine_requests import codes_of, collect, fixed_length
from ttsfleet_runtime.engine.api import SynthesisRequest
from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.engine.prefill_rows import PREFILL_PROMPTS, Prompt, SlotParams
from ttsfleet_runtime.model.weights import load_model

LENGTHS = (7, 12, 3, 20, 9)  # prompt positions, one prompt per slot below
SLOTS = (3, 0, 5, 1, 2)
FRAMES = 4


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint, "cpu", "float32", max_positions=256)


def runner_of(model) -> ModelRunner:
    runner = ModelRunner(
        model, max_batch=8, max_len=256, max_text=32, device="cpu", cuda_graphs=False
    )
    # The engine's scheduler hands out KV blocks; here each slot owns a whole row of them.
    per_slot = runner.cache.host_table.shape[1]
    for slot in range(runner.max_batch):
        runner.set_blocks(slot, [1 + slot * per_slot + j for j in range(per_slot)])
    return runner


def slot_kv(runner: ModelRunner, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values of `slot`'s positions [layers, kv_heads, max_len, head_dim]."""
    blocks = runner.cache.host_table[slot].long()
    k, v = runner.cache.k[:, blocks], runner.cache.v[:, blocks]  # [layers, n, K, block, d]
    layers, n, heads, block, d = k.shape
    merge = lambda t: t.transpose(1, 2).reshape(layers, heads, n * block, d)  # noqa: E731
    return merge(k), merge(v)


def prompts(model) -> list[Prompt]:
    g = torch.Generator().manual_seed(0)
    hidden = model.config.talker.hidden_size
    out = []
    for i, (T, slot) in enumerate(zip(LENGTHS, SLOTS, strict=True)):
        params = SlotParams(
            temperature=0.7 + 0.1 * i,
            top_k=0 if i % 2 else 40,
            top_p=0.9 if i % 2 else 1.0,
            repetition_penalty=1.05,
            subtalker_temperature=0.8,
            subtalker_top_k=30,
            subtalker_top_p=0.95,
            seed=100 + i,
            min_frames=FRAMES,
        )
        out.append(Prompt(slot, torch.randn(T, hidden, generator=g), params))
    return out


def decode_frames(runner: ModelRunner, prompts: list[Prompt]) -> np.ndarray:
    """FRAMES decode steps over every prompted slot -> codes [frames, batch, 16]."""
    extent = max(p.slot for p in prompts) + 1
    active = [False] * extent
    for i, p in enumerate(prompts):
        active[p.slot] = True
        runner.set_text(p.slot, [10 + i, 20 + i, 30 + i], 0)
    longest = max(p.embeds.shape[0] for p in prompts)
    frames = []
    for f in range(FRAMES):
        codes, _ = runner.decode(extent, active, longest + f + 1)
        frames.append(codes.numpy())
    return np.stack(frames)


def test_one_packed_call_gives_the_codes_of_one_call_per_prompt(model):
    todo = prompts(model)
    alone, packed = runner_of(model), runner_of(model)
    for prompt in todo:
        alone.prefill([prompt])
    packed.prefill(todo)

    slots = list(SLOTS)
    for name in ("code0", "seen", "position", "frame", "seed", "top_k", "min_frames"):
        a, b = getattr(alone.state, name)[slots], getattr(packed.state, name)[slots]
        assert torch.equal(a, b), name
    torch.testing.assert_close(packed.state.hidden[slots], alone.state.hidden[slots])
    for p in todo:
        T = p.embeds.shape[0]
        for mine, theirs in zip(slot_kv(packed, p.slot), slot_kv(alone, p.slot), strict=True):
            torch.testing.assert_close(mine[:, :, :T], theirs[:, :, :T])
    assert packed.state.position[slots].tolist() == list(LENGTHS)

    np.testing.assert_array_equal(decode_frames(packed, todo), decode_frames(alone, todo))


def test_a_packed_call_writes_only_its_prompts_slots(model):
    runner = runner_of(model)
    s = runner.state
    s.seed.fill_(777)
    s.code0.fill_(5)
    runner.cache.k.fill_(float("nan"))
    runner.cache.v.fill_(float("nan"))
    todo = prompts(model)[:2]  # slots 3 and 0: every other row is unused
    runner.prefill(todo)

    others = [slot for slot in range(runner.max_batch) if slot not in (3, 0)]
    assert s.seed[others].eq(777).all() and s.code0[others].eq(5).all()
    for slot in others:
        assert all(t.isnan().all() for t in slot_kv(runner, slot))
    for p in todo:
        T = p.embeds.shape[0]
        k, v = slot_kv(runner, p.slot)
        assert k[:, :, :T].isfinite().all() and v[:, :, :T].isfinite().all()
        assert k[:, :, T:].isnan().all()  # nothing past the prompt
    assert s.seed[[3, 0]].tolist() == [100, 101]


def test_a_smaller_buckets_capture_after_a_large_call_reads_in_bounds(model):
    """What a graph capture of a bucket runs (its prefill step) after a packed call
    longer than that bucket: on the call's rows, whose last positions lie beyond the
    bucket, it gathers out of bounds (on a GPU a device-side assert that ends every
    stream); on unused rows it reads in bounds, writes only the scratch row, and the
    call's rows are back afterwards."""
    runner = runner_of(model)
    small = runner.prefill_buckets[0]
    hidden = model.config.talker.hidden_size
    params = prompts(model)[0].params
    long_prompts = [Prompt(slot, torch.randn(small, hidden), params) for slot in (0, 1)]
    runner.prefill(long_prompts)  # 2 x small positions: a larger bucket
    rows = runner.prefill_ints.clone(), runner.prefill_floats.clone()
    with pytest.raises(IndexError):
        runner._prefill_step(small)
    seeds = runner.state.seed[: runner.max_batch].clone()
    with runner._prompt_rows_unused():
        runner._prefill_step(small)
    assert torch.equal(runner.state.seed[: runner.max_batch], seeds)  # slots untouched
    assert torch.equal(runner.prefill_ints, rows[0])
    assert torch.equal(runner.prefill_floats, rows[1])


def test_a_call_beyond_the_limits_is_refused(model):
    runner = runner_of(model)
    hidden = model.config.talker.hidden_size
    params = prompts(model)[0].params
    with pytest.raises(ValueError, match="prefill limit"):
        runner.prefill([Prompt(0, torch.zeros(runner.max_prompt + 1, hidden), params)])
    with pytest.raises(ValueError, match="prefill limit"):
        runner.prefill([Prompt(0, torch.zeros(1, hidden), params)] * (PREFILL_PROMPTS + 1))


async def test_a_burst_is_prefilled_in_one_call_with_the_codes_of_one_by_one(make_engine):
    """Requests of different prompt lengths (voice, language, instructions)
    arriving together: one packed call, and the same codes as when the engine
    is held to one prompt per call."""
    engine = await make_engine(max_batch=4)
    calls: list[int] = []
    real_prefill = engine.runner.prefill

    def counting(todo):
        calls.append(len(todo))
        return real_prefill(todo)

    engine.runner.prefill = counting
    burst = [
        ("ryan", None, "english"),
        ("vivian", None, "auto"),
        ("ryan", "Speak slowly, with a warm and calm voice.", "english"),
        ("vivian", "Cheerful.", "chinese"),
    ]

    async def run() -> list[np.ndarray]:
        with engine.core.lock:  # the engine thread plans once all have arrived
            streams = submit_all()
        await asyncio.gather(*(collect(s) for s in streams))
        return [codes_of(s) for s in streams]

    def submit_all():
        return [
            engine.submit(
                SynthesisRequest(
                    text="A burst of requests, all at once.",
                    voice=voice,
                    instructions=instructions,
                    language=language,
                    params=fixed_length(frames=6, seed=40 + i),
                )
            )
            for i, (voice, instructions, language) in enumerate(burst)
        ]

    lengths = {
        engine.builder.prompt_length(engine.builder.voice(v, i, lang)) for v, i, lang in burst
    }
    assert len(lengths) > 1  # the prompts really differ in length
    packed = await run()
    assert calls == [len(burst)]
    calls.clear()
    engine.scheduler.max_prefill_prompts = 1
    one_by_one = await run()
    assert calls == [1] * len(burst)
    for a, b in zip(packed, one_by_one, strict=True):
        np.testing.assert_array_equal(a, b)
