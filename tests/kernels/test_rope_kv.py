"""qk_norm_rope_write against the eager decode path: qk_norm_rope_eager on the split QKV
projection, then the index_put writes of k and v into the cache.

Runs on the GPU when there is one, else in Triton's interpreter (TRITON_INTERPRET=1).
The whole cache is compared, so a write to the wrong row, head or position fails.
"""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels.rope_kv import qk_norm_rope_write
from ttsfleet_runtime.model.layers import RotaryTable, qk_norm_rope_eager

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Triton's interpreter casts float32 to bfloat16 toward zero (the GPU rounds to nearest),
# and the kernel rounds three times like the eager path: about twice the GPU's error.
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 1e-2 if DEVICE == "cuda" else 2e-2}
EPS = 1e-6


def relative_error(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def make_case(dtype, group, batch=3, kv_heads=2, d=32, max_len=24, seed=0):
    """qkv a [:, :N] view of a wider projection output; the caches 5-D [layer, slot, ...]
    filled with random values (the test's layer is [1][:B])."""
    g = torch.Generator().manual_seed(seed)
    heads = kv_heads * group
    n = (heads + 2 * kv_heads) * d
    qkv = torch.randn(batch, n + 16, generator=g).to(DEVICE, dtype)[:, :n]
    # Weights away from 1 so a missing multiply shows; a large-magnitude input so the norm does.
    q_weight, k_weight = (1 + 0.2 * torch.randn(2, d, generator=g)).to(DEVICE, dtype)
    qkv.mul_(3.0)
    shape = (2, batch + 2, kv_heads, max_len, d)
    k_all = torch.randn(shape, generator=g).to(DEVICE, dtype)
    v_all = torch.randn(shape, generator=g).to(DEVICE, dtype)
    positions = torch.tensor([0, max_len - 1, 7, 3][:batch], device=DEVICE)
    return heads, qkv, q_weight, k_weight, k_all, v_all, positions


def eager(heads, qkv, q_weight, k_weight, rope, positions, k_cache, v_cache):
    """The eager decode path for one position per row: norms and RoPE in the dtype, with
    cos/sin cast to it, then index_put writes of k and v."""
    B, K, _, d = k_cache.shape
    q, k, v = qkv.split([heads * d, K * d, K * d], dim=-1)
    cos = rope.cos[positions].to(qkv.dtype)[:, None, None]  # [B, 1, 1, d]
    sin = rope.sin[positions].to(qkv.dtype)[:, None, None]
    q, k = qk_norm_rope_eager(
        q.reshape(B, 1, heads, d), k.reshape(B, 1, K, d), q_weight, k_weight, cos, sin, EPS
    )
    rows = torch.arange(B, device=qkv.device)
    k_cache[rows, :, positions] = k[:, :, 0]
    v_cache[rows, :, positions] = v.reshape(B, K, d)
    return q[:, :, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group", [1, 2])
def test_matches_eager_norm_rope_and_cache_writes(dtype, group):
    heads, qkv, q_weight, k_weight, k_all, v_all, positions = make_case(dtype, group)
    B, d = qkv.shape[0], k_all.shape[-1]
    rope = RotaryTable(d, theta=1e6, max_positions=32).to(DEVICE)
    k_expected, v_expected = k_all.clone(), v_all.clone()
    q_expected = eager(
        heads, qkv, q_weight, k_weight, rope, positions, k_expected[1][:B], v_expected[1][:B]
    )

    q = qk_norm_rope_write(
        qkv, q_weight, k_weight, rope.cos, rope.sin, positions, k_all[1][:B], v_all[1][:B], EPS
    )

    assert q.shape == (B, heads, d) and q.dtype == dtype and q.is_contiguous()
    assert relative_error(q, q_expected) < TOLERANCE[dtype]
    written = torch.zeros(k_all.shape, dtype=torch.bool, device=DEVICE)
    written[1, torch.arange(B, device=DEVICE), :, positions] = True
    # Nothing else in either cache changes; v is copied as is; k is normed and roped.
    assert torch.equal(k_all[~written], k_expected[~written])
    assert torch.equal(v_all, v_expected)
    assert relative_error(k_all[written], k_expected[written]) < TOLERANCE[dtype]


def test_rejects_a_projection_that_does_not_match_the_cache():
    heads, qkv, q_weight, k_weight, k_all, v_all, positions = make_case(torch.float32, 2)
    rope = RotaryTable(k_all.shape[-1], theta=1e6, max_positions=32).to(DEVICE)
    with pytest.raises(ValueError):
        qk_norm_rope_write(
            qkv[:, :-1], q_weight, k_weight, rope.cos, rope.sin, positions,
            k_all[1][:3], v_all[1][:3], EPS,
        )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_writes_land_in_the_rows_blocks(dtype):
    """Rows at positions in their first block, at a block's first and last offsets, and
    several blocks in; a shuffled block table. Only each row's one (block, offset) changes."""
    page, width = 16, 3
    heads, qkv, q_weight, k_weight, k_all, v_all, _ = make_case(dtype, group=2, batch=4)
    B, K, d = qkv.shape[0], k_all.shape[2], k_all.shape[-1]
    positions = torch.tensor([5, 16, 31, 40], device=DEVICE)
    g = torch.Generator().manual_seed(4)
    table = torch.randperm(B * width + 2, generator=g)[: B * width].view(B, width)
    table = table.to(DEVICE, torch.int32)
    pool_shape = (B * width + 2, K, page, d)
    k_pool = torch.randn(pool_shape, generator=g).to(DEVICE, dtype)
    v_pool = torch.randn(pool_shape, generator=g).to(DEVICE, dtype)
    rope = RotaryTable(d, theta=1e6, max_positions=page * width).to(DEVICE)
    # The eager path on slot-major rows, then where each row's write goes in the pool.
    k_rows = torch.zeros(B, K, page * width, d, dtype=dtype, device=DEVICE)
    v_rows = torch.zeros_like(k_rows)
    q_expected = eager(heads, qkv, q_weight, k_weight, rope, positions, k_rows, v_rows)
    blocks = table[torch.arange(B, device=DEVICE), positions // page].long()
    k_expected, v_expected = k_pool.clone(), v_pool.clone()
    rows = torch.arange(B, device=DEVICE)
    k_expected[blocks, :, positions % page] = k_rows[rows, :, positions]
    v_expected[blocks, :, positions % page] = v_rows[rows, :, positions]

    q = qk_norm_rope_write(
        qkv, q_weight, k_weight, rope.cos, rope.sin, positions, k_pool, v_pool, EPS,
        block_table=table,
    )  # fmt: skip

    assert relative_error(q, q_expected) < TOLERANCE[dtype]
    written = torch.zeros(pool_shape, dtype=torch.bool, device=DEVICE)
    written[blocks, :, positions % page] = True
    assert torch.equal(k_pool[~written], k_expected[~written])
    assert torch.equal(v_pool, v_expected)
    assert relative_error(k_pool[written], k_expected[written]) < TOLERANCE[dtype]
