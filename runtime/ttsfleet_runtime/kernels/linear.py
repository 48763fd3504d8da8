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

The block sizes come from `TABLE` (kernels/linear_table.py, with the rule that picks this
kernel or cuBLAS per shape), measured on the GPU by bench/kernel_linear.py at 7d79071 per
(M bucket, N, K), never from run-time autotuning: a decode step is captured in CUDA graphs at
start-up and every compile there delays readiness. Unknown shapes get `default_config`.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .linear_table import LinearConfig, config_for

# Triton's interpreter multiplies bf16 tl.dot operands as raw integers, so under it the dot
# variant gets float32 operands (F32_DOT: exact products, float32 sums as on the tensor cores).
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


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
    scale_ptr,
    rows,
    cols,
    row_mask,
    col_mask,
    stride_om,
    stride_rm,
    BIAS: tl.constexpr,
    RESIDUAL: tl.constexpr,
    W_SCALE: tl.constexpr,
):
    """Epilogue: acc (float32, indexed by broadcastable rows/cols) times the weight's scale
    per output column (fp8 codes), + bias + residual, stored in out's dtype with one
    rounding."""
    if W_SCALE:
        acc *= tl.load(scale_ptr + cols, mask=col_mask, other=0.0)
    if BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    mask = row_mask & col_mask
    if RESIDUAL:
        acc += tl.load(res_ptr + rows * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows * stride_om + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemv_tile(w_ptr, cols, col_mask, k0, K, BLOCK_K: tl.constexpr):
    """The weight tile [BLOCK_N, BLOCK_K] at k0 (zeros past K), in float32 (e4m3 codes
    widen exactly)."""
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
    scale_ptr,
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
    W_SCALE: tl.constexpr,
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
    if DOT and W_SCALE:
        # fp8 codes on the tensor cores: out^T = W @ x^T, the widened weight tile as the
        # left operand. Hopper's wgmma takes that operand from registers, where the codes
        # are widened, while x^T comes through shared memory as Triton pipelines it; as the
        # right operand the widened tile would make a round trip through shared memory
        # each step (measured 2-8x slower than bf16 weights at M >= 8).
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_mask = ks < K
            x_t = _load_input(
                x_ptr,
                nw_ptr,
                rows[None, :],
                ks[:, None],
                k_mask[:, None] & row_mask[None, :],
                k_mask[:, None],
                stride_xm,
                K,
                rstd[None, :],
                NORM,
                GATED,
            )
            w = tl.load(
                w_ptr + cols[:, None] * K + ks[None, :],
                mask=col_mask[:, None] & k_mask[None, :],
                other=0.0,
            )
            if F32_DOT:
                acc = tl.dot(w.to(tl.float32), x_t.to(tl.float32), acc, input_precision="ieee")
            else:
                # e4m3 codes widen exactly to bf16 (3 mantissa bits, exponents in range).
                acc = tl.dot(w.to(x_t.dtype), x_t, acc)
        rows_2d, cols_2d = rows[None, :], cols[:, None]
        row_mask_2d, col_mask_2d = row_mask[None, :], col_mask[:, None]
    elif DOT:
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
        scale_ptr,
        rows_2d,
        cols_2d,
        row_mask_2d,
        col_mask_2d,
        stride_om,
        stride_rm,
        BIAS,
        RESIDUAL,
        W_SCALE,
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
    weight_scale: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    config: LinearConfig | None = None,
) -> torch.Tensor:
    """prologue(x) @ weight.T (+ bias) (+ residual), accumulated in float32.

    x: [..., K], or [..., 2K] when `gated`; rows may be strided, the last dimension must be
    contiguous. weight: [N, K] contiguous. bias: [N]; norm_weight: [K]; residual, out:
    [..., N] with a contiguous last dimension (out may be `residual`, not x). Every tensor
    has x's dtype (bf16, fp16 or fp32), but for fp8 weights: `weight` float8_e4m3fn codes
    and `weight_scale` float32 [N] (or [1, N]), the product is then
    prologue(x) @ (weight * weight_scale[:, None]).T, x never quantized. prologue:
    `rms_norm_eager(x, norm_weight, eps)` when norm_weight is given, `silu_mul_eager(x)`
    when gated (not both). `config` overrides the table (the benchmark's sweep); the
    table is `FP8_TABLE` for fp8 codes."""
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
    if weight_scale is not None:
        if weight.dtype != torch.float8_e4m3fn:
            raise ValueError(
                f"linear: weight_scale goes with float8_e4m3fn codes, not {weight.dtype}"
            )
        if weight_scale.numel() != n or weight_scale.dtype != torch.float32:
            raise ValueError(
                f"linear: weight_scale must be {n} float32 values (one an output column), "
                f"got {tuple(weight_scale.shape)} {weight_scale.dtype}"
            )
        weight_scale = weight_scale.reshape(n).contiguous()
    else:
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
    fp8 = weight_scale is not None
    cfg = config if config is not None else config_for(m, n, k, fp8=fp8)
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
        weight_scale if fp8 else weight,
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
        W_SCALE=fp8,
        DOT=cfg.variant == "dot",
        F32_DOT=f32_dot,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out
