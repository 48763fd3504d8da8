"""Decode attention: one query per row over a paged or slot-major KV cache, lengths read on
the GPU.

Why a kernel of our own: the engine used SDPA with an additive mask over a fixed-length
view, so each (batch, length) bucket needed its own CUDA graph, and cuDNN ran a prefill
flash kernel with one live query row per tile. Here each row's length is loaded from
device memory and bounds the loop over key blocks, so one captured graph per batch size
serves every KV length, and no positions past a row's length are read.

Layout: q [B, H, d]; lengths [B] int64, row b attends to positions 0..lengths[b]-1 (>= 1).
Two cache layouts, one kernel (PAGED is a compile-time switch):
- slot-major: k_cache, v_cache [B, K, L, d] (any strides, e.g. the code predictor's
  `cache.k[layer][:B]`): row b's position p at [b, :, p];
- paged: k_cache, v_cache are a pool of blocks [N, K, PAGE, d] and block_table [B, W]
  int32 names row b's blocks: position p lives in block block_table[b, p // PAGE] at
  offset p % PAGE (engine/kv_cache.py). The key tile never straddles a block (it is at
  most PAGE, both powers of two), so the indirection is one scalar load per tile.

One program handles one (row, KV head): the H/K query heads of that group are the rows
of one tl.dot tile (padded to 16), so each key/value block is loaded once for the group.
Softmax and accumulation are float32 (online softmax in base 2).

Split-KV (flash-decoding): when B*K programs cannot fill the GPU, each (row, KV head)
is cut into `splits` programs, chosen from the shapes (B, K, L) only so the grid is the
same for every replay of a graph (paged: L = W * PAGE). Split s covers its share of the
row's live length, computed in the kernel (chunks rounded to the key tile, and paged to
whole blocks): short rows leave the last
splits empty, which write an empty partial (max -inf, sum 0). A second kernel merges the
partial (max, sum, accumulator) triples. With one split the first kernel writes the
output and there is no merge.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# Enough programs for about two waves over the SMs before splitting stops paying.
_WAVES = 2
# A split shorter than this spends more on its partial write and the merge than it saves.
_MIN_SPLIT_POSITIONS = 128
_MAX_SPLITS = 32
# tl.dot needs every tile side >= 16: the query-group rows are padded up to this.
_MIN_DOT = 16
_H100_SMS = 132
# Triton's interpreter multiplies bfloat16 dot operands as their raw uint16 bits (3.9):
# there the dot operands are cast to float32 so CPU tests check everything else.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_DOT_TYPES = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


@triton.jit
def _decode_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    lengths_ptr,
    table_ptr,
    out_ptr,
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    stride_qb,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kl,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vl,
    stride_vd,
    stride_tb,
    stride_ob,
    stride_oh,
    stride_od,
    scale_log2e,
    PAGED: tl.constexpr,
    PAGE: tl.constexpr,
    KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_TYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    b = (pid // KV_HEADS).to(tl.int64)
    kh = (pid % KV_HEADS).to(tl.int64)
    length = tl.load(lengths_ptr + b).to(tl.int32)

    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < GROUP
    d_mask = offs_d < HEAD_DIM
    heads = kh * GROUP + offs_g
    q = tl.load(
        q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(DOT_TYPE)

    if NUM_SPLITS == 1:
        start = 0
        stop = length
    else:
        # Chunks of whole key tiles; paged, of whole blocks (PAGE is a multiple of the tile).
        unit = PAGE if PAGED else BLOCK_N
        chunk = tl.cdiv(tl.cdiv(length, NUM_SPLITS), unit) * unit
        start = split * chunk
        stop = tl.minimum(start + chunk, length)

    k_head = k_ptr + kh * stride_kh + offs_d[None, :] * stride_kd
    v_head = v_ptr + kh * stride_vh + offs_d[None, :] * stride_vd
    if not PAGED:
        k_base = k_head + b * stride_kb
        v_base = v_head + b * stride_vb
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for n0 in range(start, stop, BLOCK_N):
        pos = n0 + offs_n
        n_mask = pos < stop
        kv_mask = n_mask[:, None] & d_mask[None, :]
        if PAGED:
            # The tile lies inside one block: where that block is, then offsets in it.
            block = tl.load(table_ptr + b * stride_tb + n0 // PAGE).to(tl.int64)
            k_base = k_head + block * stride_kb
            v_base = v_head + block * stride_vb
            pos = n0 % PAGE + offs_n
        k = tl.load(k_base + pos[:, None] * stride_kl, mask=kv_mask, other=0.0).to(DOT_TYPE)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2e
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + pos[:, None] * stride_vl, mask=kv_mask, other=0.0).to(DOT_TYPE)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_TYPE), v, input_precision=DOT_PRECISION)
        m_i = m_new

    if NUM_SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(
            out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :] * stride_od,
            out.to(out_ptr.dtype.element_ty),
            mask=g_mask[:, None] & d_mask[None, :],
        )
    else:
        # Partials [B, H, NUM_SPLITS] (+ [HEAD_DIM]), contiguous.
        part = (b * (KV_HEADS * GROUP) + heads) * NUM_SPLITS + split
        tl.store(part_m_ptr + part, m_i, mask=g_mask)
        tl.store(part_l_ptr + part, l_i, mask=g_mask)
        tl.store(
            part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :],
            acc,
            mask=g_mask[:, None] & d_mask[None, :],
        )


@triton.jit
def _merge_splits_kernel(
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    stride_od,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # b * HEADS + h
    b = row // HEADS
    h = row % HEADS
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < NUM_SPLITS
    d_mask = offs_d < HEAD_DIM
    part = row * NUM_SPLITS + offs_s
    m = tl.load(part_m_ptr + part, mask=s_mask, other=float("-inf"))
    l_s = tl.load(part_l_ptr + part, mask=s_mask, other=0.0)
    acc = tl.load(
        part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :],
        mask=s_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    # Split 0 is never empty (length >= 1), so the max is finite and empty splits weigh 0.
    weight = tl.exp2(m - tl.max(m, 0))
    out = tl.sum(acc * weight[:, None], 0) / tl.sum(l_s * weight, 0)
    tl.store(
        out_ptr + b * stride_ob + h * stride_oh + offs_d * stride_od,
        out.to(out_ptr.dtype.element_ty),
        mask=d_mask,
    )


@functools.cache
def sm_count(device: torch.device) -> int:
    """The device's SM count (an H100's off the GPU, for the CPU interpreter)."""
    if device.type != "cuda":
        return _H100_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def split_count(batch: int, kv_heads: int, max_len: int, sms: int = _H100_SMS) -> int:
    """Splits per (row, KV head), from shapes only: enough programs for about two waves
    over the SMs, each split at least _MIN_SPLIT_POSITIONS of the view's length."""
    programs = batch * kv_heads
    by_occupancy = triton.cdiv(_WAVES * sms, programs)
    by_length = max(1, max_len // _MIN_SPLIT_POSITIONS)
    return max(1, min(by_occupancy, by_length, _MAX_SPLITS))


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    lengths: torch.Tensor,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    splits: int | None = None,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of one query per row: q [B, H, d] over k_cache/v_cache up to lengths[b]
    (int64 [B], each >= 1) -> [B, H, d] in q's dtype (written into `out` if given).
    Caches [B, K, L, d]; or, with `block_table` [B, W] int32, pools [N, K, PAGE, d] read
    through the table (PAGE a power of two >= 16; L = W * PAGE). `splits` overrides the
    split-KV count (tests, benchmarks); by default it is chosen from the shapes.
    Graph-safe: no sync, allocations depend on shapes only."""
    B, H, d = q.shape
    Bk, K, L, dk = k_cache.shape
    paged = block_table is not None
    if paged:
        page = L
        if block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError(f"block_table must be [{B}, W], got {tuple(block_table.shape)}")
        if page < _MIN_DOT or page & (page - 1):
            raise ValueError(f"a block holds a power of two >= {_MIN_DOT} positions, got {page}")
        Bk, L = B, block_table.shape[1] * page
    if (Bk, dk) != (B, d) or v_cache.shape != k_cache.shape or H % K:
        raise ValueError(f"shapes q {tuple(q.shape)} k {tuple(k_cache.shape)}")
    if lengths.shape != (B,):
        raise ValueError(f"lengths must be [{B}], got {tuple(lengths.shape)}")
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if splits is None:
        splits = split_count(B, K, L, sm_count(q.device))
    if scale is None:
        scale = d**-0.5
    group = H // K
    dot_type = tl.float32 if _INTERPRETED else _DOT_TYPES[q.dtype]
    fp32 = q.dtype == torch.float32
    block_n = max(_MIN_DOT, min(32 if fp32 else 64, triton.next_power_of_2(L)))
    if paged:
        block_n = min(block_n, page)
    block_d = triton.next_power_of_2(d)
    if splits > 1:
        part_m = torch.empty((B, H, splits), dtype=torch.float32, device=q.device)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty((B, H, splits, d), dtype=torch.float32, device=q.device)
    else:
        part_m = part_l = part_acc = out  # unused by the one-split kernel
    _decode_attention_kernel[(B * K, splits)](
        q,
        k_cache,
        v_cache,
        lengths,
        block_table if paged else lengths,  # unused when not paged
        out,
        part_m,
        part_l,
        part_acc,
        *q.stride(),
        *k_cache.stride(),
        *v_cache.stride(),
        block_table.stride(0) if paged else 0,
        *out.stride(),
        scale * 1.4426950408889634,  # log2(e): the kernel works in base 2
        PAGED=paged,
        PAGE=page if paged else 1,
        KV_HEADS=K,
        GROUP=group,
        HEAD_DIM=d,
        NUM_SPLITS=splits,
        BLOCK_G=max(_MIN_DOT, triton.next_power_of_2(group)),
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        DOT_TYPE=dot_type,
        DOT_PRECISION="ieee" if dot_type == tl.float32 else "tf32",
        num_warps=4,
        num_stages=2,
    )
    if splits > 1:
        _merge_splits_kernel[(B * H,)](
            part_m,
            part_l,
            part_acc,
            out,
            *out.stride(),
            HEADS=H,
            HEAD_DIM=d,
            NUM_SPLITS=splits,
            BLOCK_S=triton.next_power_of_2(splits),
            BLOCK_D=block_d,
            num_warps=4,
        )
    return out
