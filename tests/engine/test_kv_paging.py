"""The paged KV cache under the engine: streams that grow across block boundaries
in a small, shared pool generate exactly what each generates alone with all its
positions in one block (the old per-slot layout); a stream waits for blocks to be
admitted, a running one stalls for a block and resumes, and when every running
stream is stalled the youngest ends; blocks come back on finish and cancel; a pool
too small for the batch refuses to start, naming the numbers and the fix."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from support.engine_requests import codes_of, collect, request
from ttsfleet_runtime.engine.kv_blocks import KVBlocks, blocks_for
from ttsfleet_runtime.engine.kv_cache import PagedKVCache, bytes_per_position
from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.model.weights import load_model

PAGE = 16  # the smallest block the kernels take: boundaries every 16 frames


def prompt_positions(engine) -> int:
    voice = engine.builder.voice("ryan", None, "english")
    return engine.builder.prompt_length(voice)


def record_stalls(engine) -> list[list[str]]:
    """The request ids each step_rows left stalled for want of a block."""
    stalls: list[list[str]] = []
    scheduler = engine.scheduler
    step_rows = scheduler.step_rows

    def recording():
        out = step_rows()
        stalls.append([seq.request_id for seq in scheduler.kv_stalled])
        return out

    scheduler.step_rows = recording
    return stalls


async def blocks_all_back(engine) -> bool:
    """Whether every KV block is free again, waiting up to 2 s: a finished stream's
    blocks come back at the engine thread's next iteration, and its stream may end
    before that (the codec thread ends it after its last chunk, a cancel at once)."""
    for _ in range(100):
        if engine.scheduler.kv.used == 0:
            return True
        await asyncio.sleep(0.02)
    return False


async def solo_codes(engine, **params) -> np.ndarray:
    stream = engine.submit(request(**params))
    await collect(stream)
    return codes_of(stream)


async def test_streams_across_block_boundaries_generate_their_solo_codes(make_engine):
    # Alone, each stream's positions fit one 64-position block: the static layout.
    one_block = await make_engine(max_batch=4)
    frames = 40
    assert prompt_positions(one_block) + frames <= 64
    solo = [await solo_codes(one_block, frames=frames, seed=s) for s in (1, 2, 3)]
    # Together in 16-position blocks taken turn by turn: each stream's blocks interleave.
    paged = await make_engine(max_batch=4, kv_block_size=PAGE, kv_blocks=16)
    streams = [paged.submit(request(frames=frames, seed=s)) for s in (1, 2, 3)]
    await asyncio.gather(*(collect(s) for s in streams))
    for stream, codes in zip(streams, solo, strict=True):
        assert stream.finish_reason == "length"
        np.testing.assert_array_equal(codes_of(stream), codes)
    assert await blocks_all_back(paged) and paged.stats().kv_cache_used_bytes == 0


async def test_a_stream_waits_for_blocks_then_runs(make_engine):
    engine = await make_engine(max_batch=2, kv_block_size=PAGE, kv_blocks=4)
    prompt = prompt_positions(engine)
    frames = 4 * PAGE - prompt - 2  # the first stream's last position is in block 4
    alone = await solo_codes(engine, frames=8, seed=9)

    first = engine.submit(request(frames=frames, seed=1))
    chunks = first.__aiter__()
    while engine.scheduler.kv.free:  # it grows into every block
        await chunks.__anext__()
    second = engine.submit(request(frames=8, seed=9))
    await asyncio.sleep(0.2)
    assert [seq.request_id for seq in engine.scheduler.waiting] == [second.request_id]
    rest = [c async for c in chunks]
    _, _ = await collect(second)

    assert first.finish_reason == second.finish_reason == "length"
    assert rest and codes_of(first).shape[0] == frames
    np.testing.assert_array_equal(codes_of(second), alone)


async def test_a_stalled_row_resumes_when_blocks_come_back(make_engine):
    engine = await make_engine(max_batch=2, kv_block_size=PAGE, kv_blocks=5)
    prompt = prompt_positions(engine)
    short, long = 2 * PAGE - prompt + 4, 4 * PAGE - prompt + 4  # end in blocks 3 and 5
    alone = await solo_codes(engine, frames=long, seed=2)
    stalls = record_stalls(engine)

    a = engine.submit(request(frames=short, seed=1, request_id="a"))
    b = engine.submit(request(frames=long, seed=2, request_id="b"))
    await asyncio.gather(collect(a), collect(b))

    # Both need a third block at once and one of the five is left: b waits until a
    # ends (in that block) and gives its three back.
    assert ["b"] in stalls and all(ids in ([], ["b"]) for ids in stalls)
    assert a.finish_reason == b.finish_reason == "length"
    np.testing.assert_array_equal(codes_of(b), alone)
    assert await blocks_all_back(engine)


async def test_when_every_running_stream_waits_for_blocks_the_youngest_ends(make_engine):
    engine = await make_engine(max_batch=2, kv_block_size=PAGE, kv_blocks=4)
    prompt = prompt_positions(engine)
    frames = 3 * PAGE - prompt + 4  # each ends in its third block: 6 > 4
    old = engine.submit(request(frames=frames, seed=1, request_id="old"))
    young = engine.submit(request(frames=frames, seed=2, request_id="young"))
    await asyncio.gather(collect(old), collect(young))

    assert old.finish_reason == "length" and codes_of(old).shape[0] == frames
    assert young.finish_reason == "error"
    assert "KV cache is full" in str(young.error) and "--kv-cache-memory" in str(young.error)
    assert await blocks_all_back(engine)


async def test_blocks_come_back_on_cancel(make_engine):
    engine = await make_engine(max_batch=2, kv_block_size=PAGE, kv_blocks=8)
    stream = engine.submit(request(frames=60, seed=1))
    chunks = stream.__aiter__()
    await chunks.__anext__()
    assert engine.stats().kv_cache_used_bytes > 0
    stream.cancel()
    assert await blocks_all_back(engine)
    stats = engine.stats()
    assert stats.kv_cache_used_bytes == 0
    assert stats.kv_cache_total_bytes == 8 * engine.runner.cache.bytes_per_block


def test_a_pool_too_small_for_the_batch_names_the_numbers(tiny_checkpoint, monkeypatch):
    """The GPU sizing, with the device's free memory faked: the pool is refused before
    anything is allocated."""
    model = load_model(tiny_checkpoint, "cpu", "float32", max_positions=512)
    per_block = bytes_per_position(model.config.talker, torch.float32) * PAGE
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    # Half of this is 30 blocks and a bit.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (61 * per_block, 1 << 40))
    with pytest.raises(ValueError) as refused:
        ModelRunner(
            model,
            max_batch=8,
            max_len=512,
            max_text=64,
            device="cuda",
            cuda_graphs=False,
            kv_cache_memory=0.5,
            kv_block_size=PAGE,
        )
    message = str(refused.value)
    # 10 s after a 64-position prompt: 189 positions, 12 blocks of 16 a stream.
    assert "30 blocks of 16 positions" in message and "0.5 of the" in message
    assert "--max-batch 8 streams of 10 s need 96 blocks" in message
    assert "lower --max-batch to 2 or raise --kv-cache-memory" in message


def test_block_accounting_fits_grows_and_returns():
    kv = KVBlocks(num_blocks=6, block_size=16)  # block 0 is the scratch block
    assert (kv.total, kv.free, kv.watermark) == (5, 5, 1)
    a: list[int] = []
    assert kv.can_admit(20) and kv.fit(a, 20) and a == [1, 2]
    assert kv.grow(a, 33) and a == [1, 2, 3]
    assert kv.grow(a, 17) and a == [1, 2, 3]  # a running stream never shrinks
    assert not kv.can_admit(17)  # two free: one for the prompt is not enough beside the watermark
    b: list[int] = []
    assert not kv.fit(b, 48) and b == []  # three needed, two free: nothing taken
    assert kv.fit(a, 5) and a == [1] and kv.free == 4  # a next piece's prompt: fit, not grow
    kv.release(a)
    assert a == [] and kv.free == 5 and kv.used == 0
    assert blocks_for(0, 16) == 0 and blocks_for(16, 16) == 1 and blocks_for(17, 16) == 2


def test_packed_prompts_land_in_their_slots_blocks():
    config = SimpleNamespace(num_hidden_layers=2, num_key_value_heads=3, head_dim=4)
    cache = PagedKVCache(config, 4, 64, 8, 8, torch.float32, "cpu")
    lengths = {1: 5, 3: 19}  # slot -> prompt positions: one block, then three
    cache.set_blocks(1, [3])
    cache.set_blocks(3, [2, 6, 4])
    k, v = torch.randn(2, 2, 3, 32, 4).unbind(0)  # [layers, heads, P, d], 24 positions used
    before = cache.k.clone()
    cache.store_prompts(list(lengths.items()), k, v)
    start, written = 0, torch.zeros(8, 8, dtype=torch.bool)
    for slot, length in lengths.items():
        blocks = cache.host_table[slot].tolist()
        for t in range(length):
            block, offset = blocks[t // 8], t % 8
            torch.testing.assert_close(cache.k[:, block, :, offset], k[:, :, start + t])
            torch.testing.assert_close(cache.v[:, block, :, offset], v[:, :, start + t])
            written[block, offset] = True
        start += length
    # Nothing else changed: other blocks, and the rest of each prompt's last block.
    assert torch.equal(
        cache.k.permute(1, 3, 0, 2, 4)[~written], before.permute(1, 3, 0, 2, 4)[~written]
    )
    with pytest.raises(ValueError, match="slot 0 holds no blocks for its 5-position prompt"):
        cache.store_prompts([(0, 5)], k, v)
