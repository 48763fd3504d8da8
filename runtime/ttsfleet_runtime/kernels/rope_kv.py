"""Per-head QK RMSNorm + RoPE + KV-cache write for one decode position, in one kernel.

Why: between the fused QKV projection and attention the eager decode step ran a norm,
a cast, a weight multiply and RoPE per q and k (a compiled kernel or several), then two
index_put kernels to write k and v into the cache. This kernel reads the projection
output once and writes q (normed, roped), k (normed, roped) and v (as is) where they go.

Layout: qkv [B, (H + 2K) * d], q heads first, then k heads, then v heads, each head's d
values contiguous. positions [B] int64: each row's RoPE position and its cache write index.
cos/sin [max_positions, d] float32 (emb = cat(freqs, freqs), rotate_half convention).
The caches are slot-major [B, K, L, d], or a paged pool [N, K, PAGE, d] with a block table
[B, W] int32: position p of row b lives in block table[b, p // PAGE] at offset p % PAGE
(the layout of kernels/decode_attention.py and engine/kv_cache.py).

Numerics follow the eager path (`rms_norm_eager`, then `apply_rope`): x * rsqrt(mean(x^2)
+ eps) in float32, cast to the input dtype, times the weight (rounded to the dtype), then
x*cos + rotate_half(x)*sin in float32 with one final rounding.

One program per (row, head) over H + K heads: a q head writes q_out; a k head writes its
roped k and copies the matching v head into the caches. Rows/positions not named by
`positions` are never touched.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _qk_norm_rope_write_kernel(
    qkv_ptr,
    q_weight_ptr,
    k_weight_ptr,
    cos_ptr,
    sin_ptr,
    positions_ptr,
    table_ptr,
    k_cache_ptr,
    v_cache_ptr,
    q_out_ptr,
    stride_xb,
    stride_xn,
    stride_cos_p,
    stride_cos_d,
    stride_sin_p,
    stride_sin_d,
    stride_pos,
    stride_tb,
    stride_kb,
    stride_kh,
    stride_kl,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vl,
    stride_vd,
    stride_qb,
    stride_qh,
    stride_qd,
    eps,
    PAGED: tl.constexpr,
    PAGE: tl.constexpr,
    HEADS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)  # q heads 0..HEADS-1, then k heads
    pos = tl.load(positions_ptr + b * stride_pos)
    dtype = qkv_ptr.dtype.element_ty

    offs = tl.arange(0, BLOCK_D)
    mask = offs < HEAD_DIM
    half = HEAD_DIM // 2
    # rotate_half(x) = cat(-x[half:], x[:half]): the partner index and its sign.
    partner = tl.where(offs < half, offs + half, offs - half)
    sign = tl.where(offs < half, -1.0, 1.0)

    row = qkv_ptr + b * stride_xb + (head * HEAD_DIM) * stride_xn
    x = tl.load(row + offs * stride_xn, mask=mask, other=0.0).to(tl.float32)
    x_partner = tl.load(row + partner * stride_xn, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / HEAD_DIM + eps)

    is_q = head < HEADS
    if is_q:
        w = tl.load(q_weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        w_partner = tl.load(q_weight_ptr + partner, mask=mask, other=0.0).to(tl.float32)
    else:
        w = tl.load(k_weight_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        w_partner = tl.load(k_weight_ptr + partner, mask=mask, other=0.0).to(tl.float32)
    # Cast after the norm and after the weight, as rms_norm_eager does.
    y = ((x * rstd).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    y_partner = ((x_partner * rstd).to(dtype).to(tl.float32) * w_partner).to(dtype)
    cos = tl.load(cos_ptr + pos * stride_cos_p + offs * stride_cos_d, mask=mask, other=0.0)
    sin = tl.load(sin_ptr + pos * stride_sin_p + offs * stride_sin_d, mask=mask, other=0.0)
    roped = (y * cos + sign * y_partner.to(tl.float32) * sin).to(dtype)

    if is_q:
        tl.store(q_out_ptr + b * stride_qb + head * stride_qh + offs * stride_qd, roped, mask=mask)
    else:
        kh = head - HEADS
        if PAGED:
            cache_row = tl.load(table_ptr + b * stride_tb + pos // PAGE).to(tl.int64)
            at = pos % PAGE
        else:
            cache_row = b
            at = pos
        tl.store(
            k_cache_ptr
            + cache_row * stride_kb
            + kh * stride_kh
            + at * stride_kl
            + offs * stride_kd,
            roped.to(k_cache_ptr.dtype.element_ty),
            mask=mask,
        )
        v_row = qkv_ptr + b * stride_xb + ((HEADS + KV_HEADS + kh) * HEAD_DIM) * stride_xn
        v = tl.load(v_row + offs * stride_xn, mask=mask, other=0.0)
        tl.store(
            v_cache_ptr
            + cache_row * stride_vb
            + kh * stride_vh
            + at * stride_vl
            + offs * stride_vd,
            v.to(v_cache_ptr.dtype.element_ty),
            mask=mask,
        )


def qk_norm_rope_write(
    qkv: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    eps: float,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """qkv [B, (H + 2K) * d] -> q [B, H, d] (normed, roped, contiguous); writes the normed,
    roped k and the raw v of row b into k_cache/v_cache [B, K, L, d] (any strides) at
    position positions[b], or with `block_table` [B, W] int32 into the pools
    [N, K, PAGE, d] through it. cos/sin: float32 tables [max_positions, d]. Graph-safe."""
    paged = block_table is not None
    rows, K, page, d = k_cache.shape
    B = qkv.shape[0] if paged else rows
    H = qkv.shape[1] // d - 2 * K
    if paged and (block_table.dim() != 2 or block_table.shape[0] != B):
        raise ValueError(f"block_table must be [{B}, W], got {tuple(block_table.shape)}")
    if qkv.dim() != 2 or qkv.shape[0] != B or H <= 0 or qkv.shape[1] != (H + 2 * K) * d:
        raise ValueError(f"qkv {tuple(qkv.shape)} does not match k_cache {tuple(k_cache.shape)}")
    if v_cache.shape != k_cache.shape or positions.shape != (B,) or cos.shape[1] != d:
        raise ValueError("v_cache, positions or cos/sin do not match k_cache")
    if d % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {d}")
    q = torch.empty((B, H, d), dtype=qkv.dtype, device=qkv.device)
    _qk_norm_rope_write_kernel[(B, H + K)](
        qkv,
        q_norm_weight,
        k_norm_weight,
        cos,
        sin,
        positions,
        block_table if paged else positions,  # unused when not paged
        k_cache,
        v_cache,
        q,
        *qkv.stride(),
        *cos.stride(),
        *sin.stride(),
        positions.stride(0),
        block_table.stride(0) if paged else 0,
        *k_cache.stride(),
        *v_cache.stride(),
        *q.stride(),
        eps,
        PAGED=paged,
        PAGE=page if paged else 1,
        HEADS=H,
        KV_HEADS=K,
        HEAD_DIM=d,
        BLOCK_D=triton.next_power_of_2(d),
        num_warps=1,
    )
    return q
