"""Matrix products for the decode step's batch sizes, with the elementwise work around them fused.

A decode step multiplies a handful of rows (M = batch, 1..256) by large bf16 weights, so it is
bound by reading the weights: at M = 1 cuBLAS picks GEMV-shaped GEMMs with split-K and a
reduce kernel and reaches about half of HBM bandwidth. One Triton kernel, in two variants
(a compile-time switch), replaces them:

- `gemv` (small M): each program owns BLOCK_N output columns of BLOCK_M rows over the whole
  K (no split-K, so no reduce kernel and no atomics). A [BLOCK_N, BLOCK_K] weight tile is
  loaded with 16-byte vector loads, many per thread before any is used, and each row of x is
  multiplied into it on the CUDA cores.
- `dot` (larger M): tensor-core tiles (tl.dot, BLOCK_M >= 16) over the whole K.

Both fuse, as compile-time flags so each call site gets its own specialisation:
- prologue, computed while loading x: `norm_weight` -> the input is
  `rms_norm_eager(x, norm_weight, eps)` (every program computes its rows' mean of squares in a
  first pass over x: K is small, x is in L2); `gated` -> x is [M, 2K] and the input is
  `silu_mul_eager(x)`. Both round like the eager functions, so the input is the same tensor.
- epilogue: `+ bias` [N], `+ residual` [M, N], one rounding to x's dtype at the end.

The block sizes come from `TABLE`, measured on the GPU by bench/kernel_linear.py at 7d79071 per
(M bucket, N, K), never from run-time autotuning: a decode step is captured in CUDA graphs at
start-up and every compile there delays readiness. Unknown shapes get `default_config`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

# Triton's interpreter multiplies bf16 tl.dot operands as raw integers, so under it the dot
# variant gets float32 operands (F32_DOT: exact products, float32 sums as on the tensor cores).
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Batch sizes are rounded up to one of these to pick a configuration.
M_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class LinearConfig:
    variant: str  # "gemv" (CUDA cores, small M) or "dot" (tensor cores)
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 1

    def __post_init__(self):
        if self.variant not in ("gemv", "dot"):
            raise ValueError(f"variant must be 'gemv' or 'dot', not {self.variant!r}")
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if self.variant == "dot" and min(self.block_m, self.block_n, self.block_k) < 16:
            raise ValueError("tl.dot needs block_m, block_n and block_k >= 16")


# (M bucket, N, K) -> (variant, block_m, block_n, block_k, num_warps, num_stages), written by
# bench/kernel_linear.py on the H100 (its --out/linear_table.py is pasted here; the script
# and its results are at commit 7d79071: bench/results/h100-2026-11-23-kernel_linear.json).
# Measured on an H100 80GB HBM3 (torch 2.11, triton 3.6), 2026-11-23: kept are the
# buckets where the fused kernel beat cuBLAS + the compiled elementwise kernels by 3% or more.
# Comments: ours, then the composition.
TABLE: dict[tuple[int, int, int], tuple[str, int, int, int, int, int]] = {
    (1, 1024, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # predictor / 0.6B o: 4.6 us, 920 GB/s; composition 7.7 us, cuBLAS alone 6.3
    (1, 1024, 3072): (
        "gemv",
        1,
        8,
        1024,
        8,
        1,
    ),  # predictor / 0.6B down: 6.3 us, 1002 GB/s; composition 9.3 us, cuBLAS alone 7.1
    (1, 2048, 1024): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # predictor lm_head: 3.9 us, 1082 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (1, 2048, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B talker o: 5.5 us, 1515 GB/s; composition 7.9 us, cuBLAS alone 6.5
    (1, 2048, 6144): (
        "gemv",
        1,
        8,
        1024,
        8,
        1,
    ),  # 1.7B talker down: 12.7 us, 1984 GB/s; composition 14.9 us, cuBLAS alone 12.8
    (1, 3072, 1024): (
        "gemv",
        1,
        4,
        512,
        4,
        1,
    ),  # 0.6B codec_head: 4.7 us, 1327 GB/s; composition 5.5 us, cuBLAS alone 5.6
    (1, 3072, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B codec_head: 7.0 us, 1801 GB/s; composition 7.7 us, cuBLAS alone 7.7
    (1, 4096, 1024): (
        "gemv",
        1,
        8,
        512,
        4,
        1,
    ),  # predictor / 0.6B qkv: 6.2 us, 1349 GB/s; composition 8.1 us, cuBLAS alone 5.9
    (1, 4096, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B talker qkv: 8.9 us, 1895 GB/s; composition 10.5 us, cuBLAS alone 8.7
    (1, 6144, 1024): (
        "gemv",
        1,
        16,
        256,
        4,
        1,
    ),  # predictor / 0.6B gate_up: 7.6 us, 1652 GB/s; composition 9.6 us, cuBLAS alone 7.5
    (1, 12288, 2048): (
        "gemv",
        1,
        16,
        256,
        4,
        1,
    ),  # 1.7B talker gate_up: 20.0 us, 2522 GB/s; composition 22.2 us, cuBLAS alone 20.3
    (2, 1024, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # predictor / 0.6B o: 4.5 us, 939 GB/s; composition 7.6 us, cuBLAS alone 6.0
    (2, 1024, 3072): (
        "gemv",
        1,
        8,
        1024,
        8,
        1,
    ),  # predictor / 0.6B down: 6.5 us, 972 GB/s; composition 9.7 us, cuBLAS alone 7.3
    (2, 2048, 1024): (
        "gemv",
        1,
        4,
        512,
        4,
        1,
    ),  # predictor lm_head: 4.3 us, 981 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (2, 2048, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B talker o: 6.1 us, 1374 GB/s; composition 8.0 us, cuBLAS alone 6.5
    (2, 3072, 1024): (
        "gemv",
        2,
        4,
        512,
        4,
        1,
    ),  # 0.6B codec_head: 5.2 us, 1202 GB/s; composition 5.5 us, cuBLAS alone 5.6
    (2, 4096, 1024): (
        "gemv",
        1,
        16,
        256,
        8,
        1,
    ),  # predictor / 0.6B qkv: 6.5 us, 1288 GB/s; composition 8.4 us, cuBLAS alone 5.8
    (2, 4096, 2048): (
        "gemv",
        2,
        4,
        512,
        4,
        1,
    ),  # 1.7B talker qkv: 10.1 us, 1671 GB/s; composition 11.3 us, cuBLAS alone 8.7
    (2, 6144, 1024): (
        "gemv",
        1,
        16,
        256,
        4,
        1,
    ),  # predictor / 0.6B gate_up: 8.0 us, 1576 GB/s; composition 10.1 us, cuBLAS alone 7.4
    (2, 12288, 2048): (
        "dot",
        16,
        128,
        128,
        8,
        3,
    ),  # 1.7B talker gate_up: 21.8 us, 2312 GB/s; composition 22.6 us, cuBLAS alone 20.2
    (4, 1024, 2048): (
        "gemv",
        2,
        4,
        1024,
        4,
        1,
    ),  # predictor / 0.6B o: 5.5 us, 767 GB/s; composition 7.5 us, cuBLAS alone 6.0
    (4, 1024, 3072): (
        "gemv",
        2,
        8,
        1024,
        8,
        1,
    ),  # predictor / 0.6B down: 8.6 us, 741 GB/s; composition 9.7 us, cuBLAS alone 7.3
    (4, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 887 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (4, 2048, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.2 us, 1175 GB/s; composition 8.0 us, cuBLAS alone 6.6
    (4, 3072, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # 0.6B codec_head: 5.4 us, 1175 GB/s; composition 5.6 us, cuBLAS alone 5.6
    (4, 6144, 1024): (
        "dot",
        16,
        32,
        256,
        4,
        3,
    ),  # predictor / 0.6B gate_up: 9.0 us, 1398 GB/s; composition 10.1 us, cuBLAS alone 7.4
    (4, 12288, 2048): (
        "dot",
        16,
        128,
        128,
        8,
        3,
    ),  # 1.7B talker gate_up: 22.0 us, 2296 GB/s; composition 23.2 us, cuBLAS alone 20.5
    (8, 1024, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.5 us, 655 GB/s; composition 7.5 us, cuBLAS alone 6.0
    (8, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 882 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (8, 2048, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.2 us, 1176 GB/s; composition 8.0 us, cuBLAS alone 6.5
    (8, 3072, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # 0.6B codec_head: 5.4 us, 1186 GB/s; composition 5.6 us, cuBLAS alone 5.7
    (8, 4096, 1024): (
        "dot",
        16,
        32,
        256,
        4,
        3,
    ),  # predictor / 0.6B qkv: 7.4 us, 1145 GB/s; composition 8.5 us, cuBLAS alone 5.9
    (8, 6144, 1024): (
        "dot",
        16,
        32,
        256,
        4,
        3,
    ),  # predictor / 0.6B gate_up: 8.9 us, 1420 GB/s; composition 10.0 us, cuBLAS alone 7.3
    (16, 1024, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.6 us, 656 GB/s; composition 7.5 us, cuBLAS alone 6.1
    (16, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 901 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (16, 2048, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.2 us, 1191 GB/s; composition 8.0 us, cuBLAS alone 6.5
    (16, 3072, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # 0.6B codec_head: 5.3 us, 1206 GB/s; composition 5.5 us, cuBLAS alone 5.6
    (32, 1024, 2048): (
        "dot",
        32,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.3 us, 707 GB/s; composition 7.4 us, cuBLAS alone 6.0
    (32, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 910 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (32, 2048, 2048): (
        "dot",
        32,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.0 us, 1247 GB/s; composition 8.1 us, cuBLAS alone 6.6
    (64, 1024, 2048): (
        "dot",
        32,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.4 us, 739 GB/s; composition 7.5 us, cuBLAS alone 6.0
    (64, 2048, 1024): (
        "dot",
        64,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.9 us, 934 GB/s; composition 5.1 us, cuBLAS alone 5.1
    (64, 2048, 2048): (
        "dot",
        64,
        32,
        128,
        4,
        4,
    ),  # 1.7B talker o: 7.9 us, 1168 GB/s; composition 8.3 us, cuBLAS alone 6.7
    (128, 1024, 2048): (
        "dot",
        64,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.7 us, 784 GB/s; composition 8.0 us, cuBLAS alone 6.1
    (128, 2048, 2048): (
        "dot",
        64,
        32,
        128,
        4,
        4,
    ),  # 1.7B talker o: 8.0 us, 1246 GB/s; composition 8.6 us, cuBLAS alone 6.9
}


def m_bucket(m: int) -> int:
    """The smallest bucket >= m (the largest bucket for bigger m)."""
    for bucket in M_BUCKETS:
        if m <= bucket:
            return bucket
    return M_BUCKETS[-1]


def default_config(m: int, n: int, k: int) -> LinearConfig:
    """A safe choice for shapes the table does not know."""
    bucket = m_bucket(m)
    if bucket <= 8:
        # Small N gets narrow blocks so that every SM has programs to run.
        return LinearConfig("gemv", bucket, 8 if n >= 2048 else 4, 512)
    return LinearConfig("dot", min(bucket, 64), 64, 128, num_warps=4, num_stages=3)


@functools.cache
def config_for(m: int, n: int, k: int) -> LinearConfig:
    """The table's entry for m's bucket, else for the nearest smaller measured bucket of the
    same (n, k), else `default_config`."""
    bucket = m_bucket(m)
    for measured in reversed(M_BUCKETS[: M_BUCKETS.index(bucket) + 1]):
        entry = TABLE.get((measured, n, k))
        if entry is not None:
            return LinearConfig(*entry)
    return default_config(m, n, k)


def beats_cublas(m: int, n: int, k: int) -> bool:
    """Whether this kernel should run an (m, n, k) product instead of cuBLAS (with the
    fused work as separate kernels): TABLE holds only the buckets where it measured faster;
    a shape the sweep never saw uses the kernel up to M = 8 (GEMV-shaped products, where
    cuBLAS splits K and reaches about half of HBM bandwidth)."""
    if m > M_BUCKETS[-1]:
        return False
    bucket = m_bucket(m)
    if (bucket, n, k) in TABLE:
        return True
    if any(key[1:] == (n, k) for key in TABLE):
        return False
    return bucket <= 8


@triton.jit
def _row_rstd(
    x_ptr, rows, row_mask, stride_xm, K, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr
):
    """1 / sqrt(mean(x[row]^2) + eps) in float32 for each of `rows` [BLOCK_M]."""
    squares = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        mask = row_mask[:, None] & (cols < K)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
        xf = x.to(tl.float32)
        squares += xf * xf
    return tl.rsqrt(tl.sum(squares, axis=1) / K + eps)


@triton.jit
def _load_input(
    x_ptr,
    nw_ptr,
    rows,
    cols,
    mask,
    col_mask,
    stride_xm,
    K,
    rstd,
    NORM: tl.constexpr,
    GATED: tl.constexpr,
):
    """The product's input at (rows, cols) (broadcastable index tensors) in x's dtype, with the
    prologue applied and rounded where the eager functions round."""
    ptrs = x_ptr + rows * stride_xm + cols
    x = tl.load(ptrs, mask=mask, other=0.0)
    if GATED:
        # silu_mul_eager: silu(gate) rounded, then times up, rounded.
        up = tl.load(ptrs + K, mask=mask, other=0.0)
        gate = x.to(tl.float32)
        silu = (gate * tl.sigmoid(gate)).to(x.dtype)
        x = (silu.to(tl.float32) * up.to(tl.float32)).to(x.dtype)
    if NORM:
        # rms_norm_eager: normalised in float32 and rounded, then times the weight, rounded.
        nw = tl.load(nw_ptr + cols, mask=col_mask, other=0.0)
        normed = (x.to(tl.float32) * rstd).to(x.dtype)
        x = (normed.to(tl.float32) * nw.to(tl.float32)).to(x.dtype)
    return x


@triton.jit
def _finish(
    acc,
    out_ptr,
    bias_ptr,
    res_ptr,
    rows,
    cols,
    row_mask,
    col_mask,
    stride_om,
    stride_rm,
    BIAS: tl.constexpr,
    RESIDUAL: tl.constexpr,
):
    """Epilogue: acc (float32, indexed by broadcastable rows/cols) + bias + residual, stored
    in out's dtype with one rounding."""
    if BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    mask = row_mask & col_mask
    if RESIDUAL:
        acc += tl.load(res_ptr + rows * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows * stride_om + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_tile(w_ptr, cols, col_mask, k0, K, BLOCK_K: tl.constexpr):
    """The weight tile [BLOCK_N, BLOCK_K] at k0 (zeros past K), in float32."""
    ks = k0 + tl.arange(0, BLOCK_K)
    mask = col_mask[:, None] & (ks < K)[None, :]
    return tl.load(w_ptr + cols[:, None] * K + ks[None, :], mask=mask, other=0.0).to(tl.float32)


@triton.jit(do_not_specialize=["M"])
def _linear_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    bias_ptr,
    res_ptr,
    nw_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_om,
    stride_rm,
    eps,
    NORM: tl.constexpr,
    GATED: tl.constexpr,
    BIAS: tl.constexpr,
    RESIDUAL: tl.constexpr,
    DOT: tl.constexpr,
    F32_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Consecutive programs share a weight tile (dimension 0 walks the rows of x).
    m0 = tl.program_id(0) * BLOCK_M
    lanes = tl.arange(0, BLOCK_M)
    rows = m0 + lanes
    row_mask = rows < M
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    rstd = tl.zeros([BLOCK_M], dtype=tl.float32)
    if NORM:
        # Chunks of 4096 elements: a few registers per thread whatever BLOCK_M.
        rstd = _row_rstd(x_ptr, rows, row_mask, stride_xm, K, eps, BLOCK_M, 4096 // BLOCK_M)
    if DOT:
        # Tensor cores; Triton pipelines the loads that feed tl.dot.
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_mask = ks < K
            a = _load_input(
                x_ptr,
                nw_ptr,
                rows[:, None],
                ks[None, :],
                row_mask[:, None] & k_mask[None, :],
                k_mask[None, :],
                stride_xm,
                K,
                rstd[:, None],
                NORM,
                GATED,
            )
            # The weight tile read as [BLOCK_K, BLOCK_N] (w is [N, K], K contiguous).
            b = tl.load(
                w_ptr + cols[None, :] * K + ks[:, None],
                mask=col_mask[None, :] & k_mask[:, None],
                other=0.0,
            )
            if F32_DOT:
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        rows_2d, cols_2d = rows[:, None], cols[None, :]
        row_mask_2d, col_mask_2d = row_mask[:, None], col_mask[None, :]
    else:
        # CUDA cores: acc[n, m], so that the weight tile's layout (N down, K across) reduces
        # along K into n.
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        # Triton pipelines only loads that feed tl.dot, so the next weight tile is loaded by
        # hand before the current one is used: two tiles in flight per program.
        w = _gemv_tile(w_ptr, cols, col_mask, 0, K, BLOCK_K)
        for k0 in range(0, K, BLOCK_K):
            # Past K the prefetch is fully masked: no memory traffic.
            w_next = _gemv_tile(w_ptr, cols, col_mask, k0 + BLOCK_K, K, BLOCK_K)
            ks = k0 + tl.arange(0, BLOCK_K)
            k_mask = ks < K
            for m in tl.static_range(BLOCK_M):
                row_rstd = tl.sum(tl.where(lanes == m, rstd, 0.0), axis=0)
                # The row test as a [BLOCK_K] vector (the interpreter rejects scalar & vector).
                row_ok = (ks * 0 + m0 + m) < M
                a = _load_input(
                    x_ptr,
                    nw_ptr,
                    m0 + m,
                    ks,
                    row_ok & k_mask,
                    k_mask,
                    stride_xm,
                    K,
                    row_rstd,
                    NORM,
                    GATED,
                )
                part = tl.sum(w * a.to(tl.float32)[None, :], axis=1)
                acc = tl.where(lanes[None, :] == m, acc + part[:, None], acc)
            w = w_next
        rows_2d, cols_2d = rows[None, :], cols[:, None]
        row_mask_2d, col_mask_2d = row_mask[None, :], col_mask[:, None]
    _finish(
        acc,
        out_ptr,
        bias_ptr,
        res_ptr,
        rows_2d,
        cols_2d,
        row_mask_2d,
        col_mask_2d,
        stride_om,
        stride_rm,
        BIAS,
        RESIDUAL,
    )


def _check(name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"linear: {name} has shape {tuple(t.shape)}, expected {shape}")
    if t.dtype != dtype:
        raise ValueError(f"linear: {name} is {t.dtype}, expected {dtype} (x's dtype)")


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    gated: bool = False,
    out: torch.Tensor | None = None,
    config: LinearConfig | None = None,
) -> torch.Tensor:
    """prologue(x) @ weight.T (+ bias) (+ residual), accumulated in float32.

    x: [..., K], or [..., 2K] when `gated`; rows may be strided, the last dimension must be
    contiguous. weight: [N, K] contiguous. bias: [N]; norm_weight: [K]; residual, out:
    [..., N] with a contiguous last dimension (out may be `residual`, not x). Every tensor
    has x's dtype (bf16, fp16 or fp32). prologue: `rms_norm_eager(x, norm_weight, eps)` when
    norm_weight is given, `silu_mul_eager(x)` when gated (not both). `config` overrides the
    table (the benchmark's sweep)."""
    if norm_weight is not None and gated:
        raise ValueError("linear: norm_weight and gated are exclusive (no layer uses both)")
    if weight.dim() != 2 or not weight.is_contiguous():
        raise ValueError(f"linear: weight must be a contiguous [N, K] matrix, got {weight.shape}")
    n, k = weight.shape
    width = 2 * k if gated else k
    if x.shape[-1] != width:
        raise ValueError(f"linear: x has {x.shape[-1]} columns, expected {width}")
    lead = tuple(x.shape[:-1])
    x2 = x.reshape(-1, width)
    if x2.stride(-1) != 1:
        raise ValueError("linear: x's last dimension must be contiguous (rows may be strided)")
    _check("weight", weight, (n, k), x.dtype)
    if bias is not None:
        _check("bias", bias, (n,), x.dtype)
        bias = bias.contiguous()
    if norm_weight is not None:
        _check("norm_weight", norm_weight, (k,), x.dtype)
        norm_weight = norm_weight.contiguous()
    res2 = None
    if residual is not None:
        _check("residual", residual, (*lead, n), x.dtype)
        res2 = residual.reshape(-1, n)
        if res2.stride(-1) != 1:
            raise ValueError("linear: residual's last dimension must be contiguous")
    if out is None:
        out = torch.empty((*lead, n), dtype=x.dtype, device=x.device)
    _check("out", out, (*lead, n), x.dtype)
    out2 = out.view(-1, n)
    if out2.stride(-1) != 1:
        raise ValueError("linear: out's last dimension must be contiguous")
    m = x2.shape[0]
    if m == 0 or n == 0:
        return out
    cfg = config if config is not None else config_for(m, n, k)
    grid = (triton.cdiv(m, cfg.block_m), triton.cdiv(n, cfg.block_n))
    # Under the interpreter, bf16 dot operands go in as float32 (see _INTERPRETED).
    f32_dot = x.dtype == torch.float32 or (_INTERPRETED and x.dtype == torch.bfloat16)
    _linear_kernel[grid](
        x2,
        weight,
        out2,
        bias if bias is not None else weight,  # unused pointers: any tensor
        res2 if res2 is not None else out2,
        norm_weight if norm_weight is not None else weight,
        m,
        n,
        k,
        x2.stride(0),
        out2.stride(0),
        res2.stride(0) if res2 is not None else 0,
        eps,
        NORM=norm_weight is not None,
        GATED=gated,
        BIAS=bias is not None,
        RESIDUAL=res2 is not None,
        DOT=cfg.variant == "dot",
        F32_DOT=f32_dot,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out
