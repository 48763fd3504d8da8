"""The decoder's remaining elementwise helpers as Triton kernels: RMSNorm, the SiLU gate,
the prefill's per-head QK norm + RoPE, and plain RoPE (the codec's pre-transformer).

Why: the matrix products fuse their norms and gates where the small-batch kernel wins
(kernels/linear.py), and the decode step's QK norm + RoPE is its own kernel
(kernels/rope_kv.py); what is left runs around cuBLAS products (prefill, large batches).
These three used to be torch.compile'd, which made every start import Dynamo and
Inductor (about 5 s) and load their compiled graphs (about 4 s with a warm cache). Plain
Triton kernels compile once into Triton's own cache and start in milliseconds.

Numerics follow the eager definitions in model/layers.py: the norm in float32, cast to
the input dtype, times the weight (rounded to the dtype); RoPE and the gate in float32
with one final rounding (as a fused compiled kernel computes them).

Each kernel handles one row (or one head of one position) per program: the rows are
short (hidden 1,024-2,048, heads of 128), so one block holds a whole row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _unit_stride(t: torch.Tensor) -> torch.Tensor:
    """t itself when its last dimension is contiguous (the kernels read rows through the
    other strides), else a contiguous copy."""
    return t if t.stride(-1) == 1 else t.contiguous()


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, out_ptr, stride_x, stride_out, eps, N: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    dtype = x_ptr.dtype.element_ty
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / N + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd).to(dtype).to(tl.float32) * w
    tl.store(out_ptr + row * stride_out + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension of x [..., N] -> a new tensor like x."""
    n = x.shape[-1]
    rows = _unit_stride(x.reshape(-1, n))
    out_dtype = torch.promote_types(x.dtype, weight.dtype)
    out = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows,
            weight,
            out,
            rows.stride(0),
            out.stride(0),
            eps,
            N=n,
            BLOCK=triton.next_power_of_2(n),
        )
    return out.view(*x.shape[:-1], n)


@triton.jit
def _silu_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, HALF: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HALF
    gate = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + HALF + offs, mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * stride_out + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [..., 2F] -> silu(gate) * up [..., F] (gate the first half)."""
    width = gate_up.shape[-1]
    half = width // 2
    rows = _unit_stride(gate_up.reshape(-1, width))
    out = torch.empty((rows.shape[0], half), dtype=gate_up.dtype, device=gate_up.device)
    block = min(1024, triton.next_power_of_2(half))
    if rows.shape[0]:
        _silu_mul_kernel[(rows.shape[0], triton.cdiv(half, block))](
            rows, out, rows.stride(0), out.stride(0), HALF=half, BLOCK=block
        )
    return out.view(*gate_up.shape[:-1], half)


@triton.jit
def _head_norm_rope_kernel(
    x_ptr,
    w_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    T,
    stride_xb,
    stride_xt,
    stride_xh,
    stride_cos_t,
    stride_sin_t,
    eps,
    HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bt = tl.program_id(0).to(tl.int64)  # b * T + t
    h = tl.program_id(1)
    b = bt // T
    t = bt % T
    dtype = x_ptr.dtype.element_ty
    offs = tl.arange(0, BLOCK_D)
    mask = offs < HEAD_DIM
    half = HEAD_DIM // 2
    # rotate_half(x) = cat(-x[half:], x[:half]): the partner index and its sign.
    partner = tl.where(offs < half, offs + half, offs - half)
    sign = tl.where(offs < half, -1.0, 1.0)
    src = x_ptr + b * stride_xb + t * stride_xt + h * stride_xh
    x = tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
    x_partner = tl.load(src + partner, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / HEAD_DIM + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w_partner = tl.load(w_ptr + partner, mask=mask, other=0.0).to(tl.float32)
    # Cast after the norm and after the weight, as rms_norm_eager does.
    y = ((x * rstd).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    y_partner = ((x_partner * rstd).to(dtype).to(tl.float32) * w_partner).to(dtype)
    cos = tl.load(cos_ptr + t * stride_cos_t + offs, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + t * stride_sin_t + offs, mask=mask, other=0.0).to(tl.float32)
    roped = y * cos + sign * y_partner.to(tl.float32) * sin
    # Output [B, HEADS, T, d], contiguous.
    out = out_ptr + ((b * HEADS + h) * T + t) * HEAD_DIM
    tl.store(out + offs, roped.to(dtype), mask=mask)


def _head_norm_rope(x, weight, cos, sin, eps: float) -> torch.Tensor:
    """x [B, T, heads, d] -> normed, roped [B, heads, T, d] (contiguous)."""
    B, T, heads, d = x.shape
    x = _unit_stride(x)
    out = torch.empty((B, heads, T, d), dtype=x.dtype, device=x.device)
    if B * T:
        _head_norm_rope_kernel[(B * T, heads)](
            x,
            weight,
            cos,
            sin,
            out,
            T,
            x.stride(0),
            x.stride(1),
            x.stride(2),
            cos.stride(0),
            sin.stride(0),
            eps,
            HEADS=heads,
            HEAD_DIM=d,
            BLOCK_D=triton.next_power_of_2(d),
        )
    return out


def qk_norm_rope(q, k, q_weight, k_weight, cos, sin, eps: float):
    """Per-head RMSNorm of q [B, T, H, d] and k [B, T, K, d] (views of the QKV
    projection: any strides), then RoPE with cos/sin [1, 1, T, d] (`RotaryTable.prefix`
    / `.at`) -> q [B, H, T, d], k [B, K, T, d]."""
    cos = _unit_stride(cos.reshape(-1, cos.shape[-1]))
    sin = _unit_stride(sin.reshape(-1, sin.shape[-1]))
    return (
        _head_norm_rope(q, q_weight, cos, sin, eps),
        _head_norm_rope(k, k_weight, cos, sin, eps),
    )


@triton.jit
def _rope_kernel(
    x_ptr,
    cos_ptr,
    sin_ptr,
    out_ptr,
    T,
    stride_xb,
    stride_xr,
    stride_xt,
    stride_cb,
    stride_ct,
    stride_sb,
    stride_st,
    ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    # One program per (stream, position): every head's row at once (one head a program
    # made 32 programs of 64 elements per position: 21 us a layer at 128 x 8 on the H100).
    bt = tl.program_id(0).to(tl.int64)  # b * T + t
    b = bt // T
    t = bt % T
    dtype = x_ptr.dtype.element_ty
    rows = tl.arange(0, BLOCK_R)
    offs = tl.arange(0, BLOCK_D)
    mask = (rows < ROWS)[:, None] & (offs < HEAD_DIM)[None, :]
    half = HEAD_DIM // 2
    partner = tl.where(offs < half, offs + half, offs - half)
    sign = tl.where(offs < half, -1.0, 1.0)
    src = x_ptr + b * stride_xb + t * stride_xt + rows[:, None] * stride_xr
    x = tl.load(src + offs[None, :], mask=mask, other=0.0).to(tl.float32)
    x_partner = tl.load(src + partner[None, :], mask=mask, other=0.0).to(tl.float32)
    d_mask = offs < HEAD_DIM
    cos = tl.load(cos_ptr + b * stride_cb + t * stride_ct + offs, mask=d_mask, other=0.0)
    sin = tl.load(sin_ptr + b * stride_sb + t * stride_st + offs, mask=d_mask, other=0.0)
    # x * cos rounded to the dtype first, then + rotate_half(x) * sin: torch.addcmul's order.
    y = (x * cos.to(tl.float32)[None, :]).to(dtype).to(tl.float32)
    y += sign[None, :] * x_partner * sin.to(tl.float32)[None, :]
    out = out_ptr + ((b * ROWS + rows[:, None]) * T + t) * HEAD_DIM + offs[None, :]
    tl.store(out, y.to(dtype), mask=mask)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`torch.addcmul(x * cos, rotate_half(x), sin)` as one launch: x [B, R, T, d] (any
    strides, the last dimension contiguous), cos and sin [B, 1, T, d] in x's dtype (each
    stream's own positions) -> a new contiguous [B, R, T, d]."""
    B, R, T, d = x.shape
    x = _unit_stride(x)
    cos, sin = _unit_stride(cos.expand(B, 1, T, d)), _unit_stride(sin.expand(B, 1, T, d))
    out = torch.empty((B, R, T, d), dtype=x.dtype, device=x.device)
    if B * T * R:
        _rope_kernel[(B * T,)](
            x,
            cos,
            sin,
            out,
            T,
            x.stride(0),
            x.stride(1),
            x.stride(2),
            cos.stride(0),
            cos.stride(2),
            sin.stride(0),
            sin.stride(2),
            ROWS=R,
            HEAD_DIM=d,
            BLOCK_R=triton.next_power_of_2(R),
            BLOCK_D=triton.next_power_of_2(d),
        )
    return out
