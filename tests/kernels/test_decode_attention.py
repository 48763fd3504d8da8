"""decode_attention against SDPA with the engine's additive mask, in float64.

Runs on the GPU when there is one, else in Triton's interpreter (TRITON_INTERPRET=1).
Cache positions at or past a row's length hold NaN, so reading one shows in the output.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ttsfleet_runtime.kernels.decode_attention import decode_attention, split_count
from ttsfleet_runtime.model.layers import decode_mask

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def reference(q, k_cache, v_cache, lengths):
    """The engine's decode attention before this kernel, in float64."""
    B, H, d = q.shape
    K, L = k_cache.shape[1], k_cache.shape[2]
    mask = decode_mask(lengths.cpu() - 1, L, torch.float64)
    # Positions past a row's length are masked, but 0 * NaN is NaN: zero them first.
    visible = torch.arange(L)[None, :] < lengths.cpu()[:, None]
    keep = visible[:, None, :, None]
    k = torch.where(keep, k_cache.cpu().double(), 0.0)
    v = torch.where(keep, v_cache.cpu().double(), 0.0)
    qg = q.cpu().double().reshape(B, K, H // K, d)
    return F.scaled_dot_product_attention(qg, k, v, attn_mask=mask).reshape(B, H, d)


def poison_past_lengths(cache, lengths):
    positions = torch.arange(cache.shape[2], device=cache.device)
    past = positions[None, :] >= lengths[:, None]
    cache.masked_fill_(past[:, None, :, None], float("nan"))


def relative_error(out, ref):
    return ((out.cpu().double() - ref).norm() / ref.norm()).item()


def make_case(dtype, group, lengths=(1, 17, 40), kv_heads=2, length=40, d=32, seed=0):
    """q a strided view; k/v the [layer][:B, :, :L] view of a bigger 5-D cache whose
    positions past each row's length hold NaN."""
    batch = len(lengths)
    g = torch.Generator().manual_seed(seed)
    H = kv_heads * group
    q_wide = torch.randn(batch, H, 2 * d, generator=g)
    shape = (2, batch + 2, kv_heads, length + 8, d)
    k_all = torch.randn(shape, generator=g)
    v_all = torch.randn(shape, generator=g)
    q_wide, k_all, v_all = (t.to(DEVICE, dtype) for t in (q_wide, k_all, v_all))
    q = q_wide[..., :d]
    k_cache, v_cache = k_all[1][:batch, :, :length], v_all[1][:batch, :, :length]
    lengths = torch.tensor(lengths, device=DEVICE)
    poison_past_lengths(k_cache, lengths)
    poison_past_lengths(v_cache, lengths)
    return q, k_cache, v_cache, lengths


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("splits", [1, 3, 8])
def test_matches_masked_sdpa(dtype, group, splits):
    q, k_cache, v_cache, lengths = make_case(dtype, group)
    assert not k_cache.is_contiguous() and not q.is_contiguous()
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=DEVICE)

    result = decode_attention(q, k_cache, v_cache, lengths, out=out, splits=splits)

    assert result is out and result.dtype == dtype
    assert torch.isfinite(out).all()
    assert relative_error(out, reference(q, k_cache, v_cache, lengths)) < TOLERANCE[dtype]


def test_default_splits_scale_and_fresh_output():
    q, k_cache, v_cache, lengths = make_case(torch.float32, group=2, seed=1)

    out = decode_attention(q, k_cache, v_cache, lengths, scale=0.3)

    assert out.shape == q.shape and out.is_contiguous()
    ref = reference(q * (0.3 * q.shape[-1] ** 0.5), k_cache, v_cache, lengths)
    assert relative_error(out, ref) < TOLERANCE[torch.float32]


def test_predictor_shape_attends_to_positions_up_to_g():
    """The code predictor: cache length 16, every row at position g sees g + 1 keys."""
    g = 5
    q, k_cache, v_cache, lengths = make_case(torch.float32, 2, [g + 1] * 4, length=16, seed=2)

    out = decode_attention(q, k_cache, v_cache, lengths)

    assert relative_error(out, reference(q, k_cache, v_cache, lengths)) < 1e-5


def test_split_count_depends_on_shapes_only():
    assert split_count(128, 8, 4096) == 1  # 1,024 programs already fill 132 SMs
    assert split_count(1, 8, 16) == 1  # the predictor's cache is too short to split
    assert split_count(1, 8, 256) == 2
    assert split_count(1, 8, 4096) == 32  # capped
    assert split_count(8, 8, 4096) == 5  # cdiv(2 * 132, 64)


def test_rejects_mismatched_shapes():
    q, k_cache, v_cache, lengths = make_case(torch.float32, group=2)
    with pytest.raises(ValueError):
        decode_attention(q[:, :3], k_cache, v_cache, lengths)
    with pytest.raises(ValueError):
        decode_attention(q, k_cache, v_cache, lengths[:2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_one_captured_graph_serves_every_length():
    """Lengths change in place between replays; split-KV and the merge are both captured."""
    q, k_cache, v_cache, lengths = make_case(torch.bfloat16, group=2, lengths=(40, 40, 40))
    out = torch.empty_like(q)
    decode_attention(q, k_cache, v_cache, lengths, out=out, splits=3)  # compile first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decode_attention(q, k_cache, v_cache, lengths, out=out, splits=3)

    for new in ([1, 2, 3], [40, 1, 23], [17, 40, 9]):
        lengths.copy_(torch.tensor(new))
        graph.replay()
        assert relative_error(out, reference(q, k_cache, v_cache, lengths)) < 1e-2


def page_out(cache, lengths, page, seed=0, spare=3):
    """A slot-major cache [B, K, L, d] as a paged pool [N, K, page, d] with a shuffled block
    table [B, L / page]: each row's blocks scattered among spare ones; every pool position
    that holds no live position is NaN."""
    B, K, L, d = cache.shape
    width = L // page
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(B * width + spare, generator=g)
    table = order[: B * width].view(B, width).to(torch.int32)
    pool = torch.full((B * width + spare, K, page, d), float("nan"), dtype=cache.dtype)
    pool = pool.to(cache.device)
    for b in range(B):
        for i in range(width):
            live = max(0, min(page, int(lengths[b]) - i * page))
            pool[table[b, i], :, :live] = cache[b, :, i * page : i * page + live]
    return pool, table.to(cache.device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("splits", [1, 3])
def test_paged_cache_matches_the_slot_major_reference(dtype, group, splits):
    """Lengths inside the first block, on a boundary and across several blocks."""
    lengths = (1, 16, 17, 47, 64)
    q, k_cache, v_cache, lengths = make_case(dtype, group, lengths=lengths, length=64, seed=3)
    k_pool, table = page_out(k_cache, lengths, page=16, seed=1)
    v_pool, _ = page_out(v_cache, lengths, page=16, seed=1)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=DEVICE)

    decode_attention(q, k_pool, v_pool, lengths, out=out, splits=splits, block_table=table)

    assert torch.isfinite(out).all()
    assert relative_error(out, reference(q, k_cache, v_cache, lengths)) < TOLERANCE[dtype]


def test_paged_cache_rejects_a_block_that_is_not_a_power_of_two():
    q, k_cache, v_cache, lengths = make_case(torch.float32, 2, lengths=(3, 5, 7), length=24)
    table = torch.zeros(3, 1, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="power of two"):
        decode_attention(q, k_cache[:, :, :24], v_cache[:, :, :24], lengths, block_table=table)
    with pytest.raises(ValueError, match="block_table"):
        decode_attention(q, k_cache[:, :, :16], v_cache[:, :, :16], lengths, block_table=table[:2])
