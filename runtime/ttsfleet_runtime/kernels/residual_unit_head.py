"""The codec decoder's last residual unit and its head in two launches: the unit as
kernels/residual_unit.py computes it, then the head, a causal convolution to one channel
(7 taps) over the unit's activated output. As its own kernel the head read that output
back (378 MB at 128 streams x 8 frames); `residual_unit_head` instead multiplies each
program's activated rows by the head's taps at once (one more tensor-core product, taps
as columns) and stores those float32 partials (7 a sample, 1/7 of the bytes), and
`_head_sum_kernel` adds each output's window of them; only the head's next history (the
last 6 activated rows) is stored as such. Block sizes are the unit's (`TABLE` there).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import conv1d
from .conv1d import _INTERPRETED, ConvConfig, _check, _mma, _outputs
from .residual_unit import (
    Activation,
    _blocks,
    _check_unit,
    _conv2_chunk,
    _f32_dot,
    _hidden,
)

# The head's taps are the columns of one tensor-core product (tl.dot needs >= 16).
HEAD_COLUMNS = tl.constexpr(16)


@triton.jit
def _tap_partials(a, w_ptr, cols, col_mask, acc, HEAD_TAPS: tl.constexpr, F32_DOT: tl.constexpr):
    """acc + a @ W[cols]: each input row's dot product with every tap of the head
    (W [C, HEAD_TAPS], its columns past HEAD_TAPS zero)."""
    taps = tl.arange(0, HEAD_COLUMNS)
    w = tl.load(
        w_ptr + cols[:, None] * HEAD_TAPS + taps[None, :],
        mask=col_mask[:, None] & (taps < HEAD_TAPS)[None, :],
        other=0.0,
    )
    return _mma(a, w, acc, F32_DOT)


@triton.jit
def _store_partials(p_base, p, rows, row_mask, HEAD_TAPS: tl.constexpr, ROW_STRIDE):
    """Tap-major: partial[tap, row] (consecutive rows of one tap are neighbours)."""
    taps = tl.arange(0, HEAD_COLUMNS)
    tl.store(
        p_base + taps[None, :] * ROW_STRIDE + rows[:, None],
        p,
        mask=row_mask[:, None] & (taps < HEAD_TAPS)[None, :],
    )


@triton.jit(do_not_specialize=["T"])
def _residual_unit_head_kernel(
    x_ptr,
    x_act_ptr,
    state_ptr,
    w1_ptr,
    b1_ptr,
    freq1_ptr,
    inv1_ptr,
    w2_ptr,
    b2_ptr,
    freq2_ptr,
    inv2_ptr,
    head_w_ptr,
    head_history_ptr,
    head_tail_ptr,
    partials_ptr,
    T,
    stride_xb,
    stride_ab,
    stride_sb,
    stride_hb,
    stride_tb,
    stride_pb,
    C: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    HEAD_TAPS: tl.constexpr,
    F32_DOT: tl.constexpr,
    FAST_SIN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """The unit, then per sample the head's tap partials of its activated output instead
    of the output: partial[tap, CONTEXT + t] = act[t] . W_head[tap] (float32); rows
    0..CONTEXT-1 are the head's history's (the first program of each stream). The last
    CONTEXT rows of act go to head_tail (the head's next history)."""
    CONTEXT = HEAD_TAPS - 1
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    b = tl.program_id(1).to(tl.int64)
    h_a, h_b = _hidden(
        x_act_ptr + b * stride_ab,
        state_ptr + b * stride_sb,
        w1_ptr,
        b1_ptr,
        freq1_ptr,
        inv1_ptr,
        t,
        T,
        C,
        TAPS,
        DILATION,
        F32_DOT,
        FAST_SIN,
        BLOCK_T,
        BLOCK_A,
        BLOCK_B,
        BLOCK_K,
    )
    row_mask = t < T
    tail_row = t - (T - CONTEXT)
    tail_mask = row_mask & (tail_row >= 0)
    p = tl.zeros([BLOCK_T, HEAD_COLUMNS], dtype=tl.float32)
    for n0 in tl.static_range(0, C, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_mask = cols < C
        out = _conv2_chunk(
            h_a, h_b, w2_ptr, b2_ptr, cols, col_mask, C, F32_DOT, BLOCK_T, BLOCK_A, BLOCK_B, BLOCK_N
        )
        # The unit's output + x, activated, rounded as the unfused path's epilogue does.
        _, act = _outputs(
            out,
            cols,
            col_mask,
            row_mask[:, None] & col_mask[None, :],
            b * stride_xb + t[:, None] * C + cols[None, :],
            x_ptr,
            x_ptr,
            freq2_ptr,
            inv2_ptr,
            C,
            True,
            True,
            FAST_SIN,
        )
        tl.store(
            head_tail_ptr + b * stride_tb + tail_row[:, None] * C + cols[None, :],
            act,
            mask=tail_mask[:, None] & col_mask[None, :],
        )
        p = _tap_partials(act, head_w_ptr, cols, col_mask, p, HEAD_TAPS, F32_DOT)
    row_stride = CONTEXT + T
    p_base = partials_ptr + b * stride_pb
    _store_partials(p_base, p, CONTEXT + t, row_mask, HEAD_TAPS, row_stride)
    if tl.program_id(0) == 0:
        rows = tl.arange(0, HEAD_COLUMNS)  # the history's rows (CONTEXT < HEAD_COLUMNS)
        ph = tl.zeros([HEAD_COLUMNS, HEAD_COLUMNS], dtype=tl.float32)
        for n0 in tl.static_range(0, C, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            col_mask = cols < C
            history = tl.load(
                head_history_ptr + b * stride_hb + rows[:, None] * C + cols[None, :],
                mask=(rows < CONTEXT)[:, None] & col_mask[None, :],
                other=0.0,
            )
            ph = _tap_partials(history, head_w_ptr, cols, col_mask, ph, HEAD_TAPS, F32_DOT)
        _store_partials(p_base, ph, rows, rows < CONTEXT, HEAD_TAPS, row_stride)


@triton.jit(do_not_specialize=["T"])
def _head_sum_kernel(
    partials_ptr,
    bias_ptr,
    out_ptr,
    T,
    stride_pb,
    HEAD_TAPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """out[t] = bias + sum_tap partial[tap, t + tap]: the head's causal convolution, its
    window's rows t .. t + CONTEXT of (history, input) (partial rows are offset by the
    history)."""
    t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = tl.program_id(1).to(tl.int64)
    mask = t < T
    row_stride = HEAD_TAPS - 1 + T
    acc = tl.zeros([BLOCK], dtype=tl.float32) + tl.load(bias_ptr).to(tl.float32)
    for tap in tl.static_range(HEAD_TAPS):
        acc += tl.load(
            partials_ptr + b * stride_pb + tap * row_stride + t + tap, mask=mask, other=0.0
        )
    tl.store(out_ptr + b * T + t, acc.to(out_ptr.dtype.element_ty), mask=mask)


# Rows of the head's tap partials a program of `_head_sum_kernel` adds up.
HEAD_SUM_BLOCK = 1024


def residual_unit_head(
    x: torch.Tensor,
    x_act: torch.Tensor,
    history: torch.Tensor | None,
    w1: torch.Tensor,
    b1: torch.Tensor,
    act2: Activation,
    w2: torch.Tensor,
    b2: torch.Tensor,
    next_activation: Activation,
    head_weight: torch.Tensor,
    head_bias: torch.Tensor,
    head_history: torch.Tensor,
    *,
    dilation: int = 1,
    config: ConvConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's last residual unit and its head, a causal convolution to one channel
    (the waveform), in two launches; the same as

        _, act = residual_unit(x, x_act, history, ..., emit_raw=False)
        y, _ = causal_conv1d(act, head_weight.t()[:, :, None], head_history, bias=head_bias)
        return y, act[:, -(taps - 1):]

    (y [B, T, 1], and the head's next history: act's last taps-1 rows) up to the order of
    float32 sums. The unit's activated output, C channels a sample, never goes to memory:
    each program multiplies its rows by the head's taps at once (one more tensor-core
    product, taps as columns) and stores those float32 partials, `taps` a sample; a second
    kernel adds up each output's window of them. head_weight: [C, taps] contiguous
    (CausalConv1d.tap_columns), taps <= 16; head_bias: [1]; head_history: [B, taps-1, C]
    (rows may be strided). T >= taps-1. The rest as `residual_unit`."""
    who = "residual_unit_head"
    x, x_act = _check_unit(x, x_act, history, w1, b1, act2, w2, b2, next_activation, dilation, who)
    batch, length, channels = x.shape
    if head_weight.dim() != 2 or not head_weight.is_contiguous():
        raise ValueError(
            f"{who}: head_weight must be contiguous [C, taps], got {head_weight.shape}"
        )
    head_taps = head_weight.shape[1]
    if not 2 <= head_taps <= HEAD_COLUMNS.value:
        raise ValueError(f"{who}: the head has {head_taps} taps, not 2..{HEAD_COLUMNS.value}")
    context = head_taps - 1
    _check("head_weight", head_weight, (channels, head_taps), x.dtype, who)
    _check("head_bias", head_bias, (1,), x.dtype, who)
    _check("head_history", head_history, (batch, context, channels), x.dtype, who)
    if length < context:
        raise ValueError(f"{who}: {length} samples, fewer than the head's history ({context})")
    y = conv1d._empty((batch, length, 1), x)
    tail = conv1d._empty((batch, context, channels), x)
    if batch == 0:
        return y, tail
    partials = torch.empty(
        (batch, head_taps, context + length), dtype=torch.float32, device=x.device
    )
    blocks = _blocks(channels, config)
    _residual_unit_head_kernel[(triton.cdiv(length, blocks["BLOCK_T"]), batch)](
        x,
        x_act,
        history if history is not None else x_act,  # unused pointer: any tensor
        w1,
        b1,
        act2[0],
        act2[1],
        w2,
        b2,
        next_activation[0],
        next_activation[1],
        head_weight,
        head_history,
        tail,
        partials,
        length,
        x.stride(0),
        x_act.stride(0),
        history.stride(0) if history is not None else 0,
        head_history.stride(0),
        tail.stride(0),
        partials.stride(0),
        C=channels,
        TAPS=w1.shape[0],
        DILATION=dilation,
        HEAD_TAPS=head_taps,
        F32_DOT=_f32_dot(x),
        FAST_SIN=not _INTERPRETED,
        **blocks,
    )
    _head_sum_kernel[(triton.cdiv(length, HEAD_SUM_BLOCK), batch)](
        partials,
        head_bias,
        y,
        length,
        partials.stride(0),
        HEAD_TAPS=head_taps,
        BLOCK=HEAD_SUM_BLOCK,
    )
    return y, tail
