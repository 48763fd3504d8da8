"""The 25 Hz DiT's elementwise steps as Triton kernels: the time-modulated LayerNorm, the
gated residual (optionally followed by the next modulated norm), and the rotary
positions of the queries and keys.

Why: in torch each DiT layer runs ~25 elementwise kernels around its six matrix
products, each a round trip through memory of a [rows, 1,024] tensor, most of them
broadcasting multiplies that take torch's slow strided path. On an H200 at 128 streams
those were ~300 ms of the 432 ms the graphed DiT windows take per call, against ~112 ms
of matrix products (bench/results/profile_step-25hz-fused.json). Here each step is one
pass over its rows.

Numerics: float32 math and one rounding to the output dtype, where torch rounds after
every operation; in float32 the kernels equal the torch definitions in
speech_tokenizer/rate25/mel_generator.py to float32 rounding (tests/kernels/test_dit_ops.py).
The residual's sum is rounded before the norm reads it, as the separate norm would see it.

One program per row (one mel frame of one window): rows are the hidden size (1,024), so
one block holds a row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_NUM_WARPS = 4


@triton.jit
def _residual_norm_kernel(
    x_ptr,
    gate_ptr,
    y_ptr,
    sum_ptr,
    scale_ptr,
    shift_ptr,
    norm_ptr,
    frames,
    stride_mod,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    RESIDUAL: tl.constexpr,
    NORM: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    batch = row // frames  # the modulation vectors are per window
    dtype = x_ptr.dtype.element_ty
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    if RESIDUAL:
        gate = tl.load(gate_ptr + batch * stride_mod + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
        x = (x + gate * y).to(dtype)
        tl.store(sum_ptr + row * N + offs, x, mask=mask)
        x = x.to(tl.float32)
    if NORM:
        mean = tl.sum(x, 0) / N
        centred = tl.where(mask, x - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(centred * centred, 0) / N + eps)
        scale = tl.load(scale_ptr + batch * stride_mod + offs, mask=mask, other=0.0).to(tl.float32)
        shift = tl.load(shift_ptr + batch * stride_mod + offs, mask=mask, other=0.0).to(tl.float32)
        out = centred * rstd * (1.0 + scale) + shift
        tl.store(norm_ptr + row * N + offs, out.to(norm_ptr.dtype.element_ty), mask=mask)


def _empty(like: torch.Tensor) -> torch.Tensor:
    """An output buffer (the tests poison it with NaN to see every element written)."""
    return torch.empty_like(like)


def _rows(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 3:
        raise ValueError(f"expected [windows, frames, hidden], got {tuple(x.shape)}")
    return x.contiguous()


def _per_window(v: torch.Tensor, x: torch.Tensor, name: str) -> torch.Tensor:
    """A modulation vector [windows, 1, hidden] (a view into the modulation linear's
    output is fine: its rows are read through their stride)."""
    batch, _, hidden = x.shape
    if v.shape != (batch, 1, hidden) or v.stride(-1) != 1:
        raise ValueError(f"{name} must be [{batch}, 1, {hidden}] with unit last stride")
    return v


def _launch(x, gate, y, summed, scale, shift, normed, eps, residual: bool, norm: bool):
    batch, frames, hidden = x.shape
    strides = {v.stride(0) for v in (gate, scale, shift) if v is not None}
    if len(strides) > 1:  # one stride argument serves every modulation vector
        gate, scale, shift = (
            v.contiguous() if v is not None else None for v in (gate, scale, shift)
        )
        strides = {hidden}
    if batch * frames:
        _residual_norm_kernel[(batch * frames,)](
            x,
            gate if gate is not None else x,
            y if y is not None else x,
            summed if summed is not None else x,
            scale if scale is not None else x,
            shift if shift is not None else x,
            normed if normed is not None else x,
            frames,
            strides.pop(),
            eps,
            N=hidden,
            BLOCK=triton.next_power_of_2(hidden),
            RESIDUAL=residual,
            NORM=norm,
            num_warps=_NUM_WARPS,
        )


def modulated_norm(
    x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """LayerNorm of x [B, T, D] without affine parameters, times (1 + scale) plus shift
    ([B, 1, D] each) -> a new tensor like x."""
    x = _rows(x)
    normed = _empty(x)
    scale, shift = _per_window(scale, x, "scale"), _per_window(shift, x, "shift")
    _launch(x, None, None, None, scale, shift, normed, eps, residual=False, norm=True)
    return normed


def gated_residual(x: torch.Tensor, gate: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + gate * y for x, y [B, T, D] and gate [B, 1, D] -> a new tensor like x."""
    x, y = _rows(x), _rows(y)
    summed = _empty(x)
    gate = _per_window(gate, x, "gate")
    _launch(x, gate, y, summed, None, None, None, 0.0, residual=True, norm=False)
    return summed


def gated_residual_norm(
    x: torch.Tensor,
    gate: torch.Tensor,
    y: torch.Tensor,
    scale: torch.Tensor,
    shift: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, modulated_norm(s, scale, shift)) for s = x + gate * y, in one pass."""
    x, y = _rows(x), _rows(y)
    summed, normed = _empty(x), _empty(x)
    gate = _per_window(gate, x, "gate")
    scale, shift = _per_window(scale, x, "scale"), _per_window(shift, x, "shift")
    _launch(x, gate, y, summed, scale, shift, normed, eps, residual=True, norm=True)
    return summed, normed


@triton.jit
def _rotate_row(src, dst, offs, mask, cos_even, sin_even, cos_odd, sin_odd):
    a = tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(src + offs + 1, mask=mask, other=0.0).to(tl.float32)
    out_dtype = dst.dtype.element_ty
    tl.store(dst + offs, (a * cos_even - b * sin_even).to(out_dtype), mask=mask)
    tl.store(dst + offs + 1, (b * cos_odd + a * sin_odd).to(out_dtype), mask=mask)


@triton.jit
def _rotate_pairs_kernel(
    q_ptr,
    k_ptr,
    cos_ptr,
    sin_ptr,
    q_out_ptr,
    k_out_ptr,
    frames,
    HEAD_DIM: tl.constexpr,
    PAIRS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    frame = row % frames
    pair = tl.arange(0, BLOCK)
    mask = pair < PAIRS
    even = 2 * pair
    table = frame * HEAD_DIM + even % HEAD_DIM  # the channel inside its head: the column
    cos_even = tl.load(cos_ptr + table, mask=mask, other=0.0).to(tl.float32)
    cos_odd = tl.load(cos_ptr + table + 1, mask=mask, other=0.0).to(tl.float32)
    sin_even = tl.load(sin_ptr + table, mask=mask, other=0.0).to(tl.float32)
    sin_odd = tl.load(sin_ptr + table + 1, mask=mask, other=0.0).to(tl.float32)
    offs = row * (2 * PAIRS) + even
    _rotate_row(q_ptr, q_out_ptr, offs, mask, cos_even, sin_even, cos_odd, sin_odd)
    _rotate_row(k_ptr, k_out_ptr, offs, mask, cos_even, sin_even, cos_odd, sin_odd)


def rotate_pairs(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary positions on interleaved channel pairs of every head: q, k [B, T, heads *
    head_dim] (frames second, heads not yet split), cos/sin [T, head_dim] (each angle
    repeated for its pair) -> new q, k in the same layout."""
    q, k = _rows(q), _rows(k)
    if q.shape != k.shape:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ")
    batch, frames, width = q.shape
    tables = (frames, head_dim)
    if width % head_dim or head_dim % 2 or cos.shape != tables or sin.shape != tables:
        raise ValueError(
            f"rotate_pairs: width {width}, head_dim {head_dim}, cos {tuple(cos.shape)}, "
            f"sin {tuple(sin.shape)} do not fit [{frames}, {head_dim}] tables"
        )
    q_out, k_out = _empty(q), _empty(k)
    if batch * frames:
        pairs = width // 2
        _rotate_pairs_kernel[(batch * frames,)](
            q,
            k,
            cos.contiguous(),
            sin.contiguous(),
            q_out,
            k_out,
            frames,
            HEAD_DIM=head_dim,
            PAIRS=pairs,
            BLOCK=triton.next_power_of_2(pairs),
            num_warps=_NUM_WARPS,
        )
    return q_out, k_out
