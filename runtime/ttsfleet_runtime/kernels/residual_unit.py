"""One residual unit of the codec decoder in one launch: both convolutions back to back.

A residual unit is conv1 (7 taps, dilated, C -> C) whose output goes through SnakeBeta,
then conv2 (1 tap, C -> C) + the unit's input x, then the activation the next layer
needs. As two calls of kernels/conv1d.py the activated conv1 output h ([B, T, C]) is
written to memory and read back, and conv2 (1/7 of the work) is bound by that traffic
(0.57 ms of 2.4 ms per unit of the last block at 128 streams x 8 frames on the H100).

Here one program owns BLOCK_T samples of one stream and the whole channel width: the
conv1 tile as in kernels/conv1d.py, in two power-of-two parts of columns (96 = 64 + 32,
192 = 128 + 64: `split_width`; one part would be padded to 128 or 256, a quarter of the
tensor-core work wasted, as the two-call path's conv1 does), h = snake(conv1 + b1) in
registers, rounded at the same two points as the two-call path (conv1's output before its
activation, h before conv2, as if it had been stored), then h @ W2 in chunks of BLOCK_N
output columns, each with conv1d's epilogue (+ b2, + x, raw and/or activated outputs).
The two calls' results, without h's round trip or the second launch.

The whole width must fit one program's registers: channels up to `MAX_CHANNELS` (the
decoder's last two blocks, 96 and 192). Wider units keep the two calls
(speech_tokenizer/rate12/convs.py).

The decoder's last unit runs with its head after it: kernels/residual_unit_head.py.

Block sizes come from `TABLE` (channels -> config: block_n is the chunk of conv2's output
columns; conv1's are always all of them), measured by bench/kernel_conv1d.py --units at 7d79071,
never from run-time autotuning (the codec is captured in CUDA graphs).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import conv1d
from .conv1d import (
    _INTERPRETED,
    ConvConfig,
    _check,
    _epilogue,
    _input_tile,
    _mma,
    _snake,
    _weight_tile,
)

# The whole width is one tile: conv1's float32 accumulators, then h in bf16 and a chunk of
# conv2's. sm_90 compiles (ptxas) at 128-sample tiles and 8 warps, no spills: 96 channels
# take 95 registers a thread (32-channel steps and chunks), 192 169 (64); 4 warps spill
# for 192. 384 spills 184 bytes and more even at 64-sample tiles (and 768 kilobytes), so
# the decoder's first two blocks keep the two calls.
MAX_CHANNELS = 256

# channels -> (block_t, block_n, block_k, warps, stages), the fastest of
# bench/kernel_conv1d.py --units on the GPU (128 streams x 8 frames; microseconds per unit;
# script and results at commit 7d79071:
# bench/results/h100-2026-11-23-issue12-s10-kernel_residual_unit.json). Both winners use
# 64-sample tiles and 4 warps: half the registers of the 128-sample tile, so twice the
# programs per SM hide the loads. Other widths: `default_config`.
TABLE: dict[int, tuple[int, int, int, int, int]] = {
    96: (64, 32, 32, 4, 3),  # block4 residual unit (96): 1163 us (two calls 1513)
    192: (64, 64, 64, 4, 3),  # block3 residual unit (192): 1109 us (two calls 1205)
}


def default_config(channels: int) -> ConvConfig:
    """128-sample tiles, 8 warps; channel steps and conv2's column chunks of 64 where 64
    divides the width, else 32 (96 channels: no half-masked steps or chunks)."""
    step = min(64 if channels % 64 == 0 else 32, max(16, triton.next_power_of_2(channels)))
    return ConvConfig(128, step, step, num_warps=8, num_stages=3)


@functools.cache
def config_for(channels: int) -> ConvConfig:
    entry = TABLE.get(channels)
    return ConvConfig(*entry) if entry is not None else default_config(channels)


@triton.jit
def _activated_part(acc, cols, col_mask, b1_ptr, freq_ptr, inv_ptr, like_ptr, FAST_SIN):
    """h = snake(conv1 + b1) for conv1's columns `cols`, rounded where the two-call path
    stores: conv1's output (its activation reads the stored value), then h (conv2 reads
    it back). Masked channels are 0 (zero weights, bias and factors): they add nothing."""
    acc += tl.load(b1_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    y = acc.to(like_ptr.dtype.element_ty)
    h = _snake(y.to(tl.float32), freq_ptr, inv_ptr, cols, col_mask, FAST_SIN)
    return h.to(like_ptr.dtype.element_ty)


@triton.jit
def _hidden(
    x_act_base,
    s_base,
    w1_ptr,
    b1_ptr,
    freq1_ptr,
    inv1_ptr,
    t,
    T,
    C: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    F32_DOT: tl.constexpr,
    FAST_SIN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """h = snake(conv1(x_act) + b1) for samples `t` of one stream, as its two column parts
    (h_a, h_b): conv1's columns in two powers of two (96 = 64 + 32, 192 = 128 + 64), so the
    tensor cores do no work on padding, as one part padded to 128 or 256 would."""
    cols_a = tl.arange(0, BLOCK_A)
    cols_b = BLOCK_A + tl.arange(0, BLOCK_B)
    mask_a = cols_a < C
    mask_b = cols_b < C
    acc_a = tl.zeros([BLOCK_T, BLOCK_A], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_T, BLOCK_B], dtype=tl.float32)
    # kernels/conv1d.py's loop, each input tile feeding both parts.
    for step in range(TAPS * ((C + BLOCK_K - 1) // BLOCK_K)):
        a, w_rows, w_row_mask = _input_tile(
            x_act_base, s_base, t, step, T, C, TAPS, DILATION, BLOCK_K
        )
        w_a = _weight_tile(w1_ptr, w_rows, w_row_mask, cols_a, mask_a, C)
        w_b = _weight_tile(w1_ptr, w_rows, w_row_mask, cols_b, mask_b, C)
        acc_a = _mma(a, w_a, acc_a, F32_DOT)
        acc_b = _mma(a, w_b, acc_b, F32_DOT)
    h_a = _activated_part(acc_a, cols_a, mask_a, b1_ptr, freq1_ptr, inv1_ptr, x_act_base, FAST_SIN)
    h_b = _activated_part(acc_b, cols_b, mask_b, b1_ptr, freq1_ptr, inv1_ptr, x_act_base, FAST_SIN)
    return h_a, h_b


@triton.jit
def _conv2_chunk(
    h_a,
    h_b,
    w2_ptr,
    b2_ptr,
    cols,
    col_mask,
    C: tl.constexpr,
    F32_DOT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """conv2's output columns `cols` (h @ W2 + b2), float32, before the residual."""
    cols_a = tl.arange(0, BLOCK_A)
    cols_b = BLOCK_A + tl.arange(0, BLOCK_B)
    out = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    out = _mma(h_a, _weight_tile(w2_ptr, cols_a, cols_a < C, cols, col_mask, C), out, F32_DOT)
    out = _mma(h_b, _weight_tile(w2_ptr, cols_b, cols_b < C, cols, col_mask, C), out, F32_DOT)
    return out + tl.load(b2_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]


@triton.jit(do_not_specialize=["T"])
def _residual_unit_kernel(
    x_ptr,
    x_act_ptr,
    state_ptr,
    w1_ptr,
    b1_ptr,
    freq1_ptr,
    inv1_ptr,
    w2_ptr,
    b2_ptr,
    raw_ptr,
    act_ptr,
    freq2_ptr,
    inv2_ptr,
    T,
    stride_xb,
    stride_ab,
    stride_sb,
    stride_ob,
    C: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    EMIT_RAW: tl.constexpr,
    F32_DOT: tl.constexpr,
    FAST_SIN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
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
    # conv2 = h @ W2 in chunks of BLOCK_N output columns, each stored with its epilogue.
    for n0 in tl.static_range(0, C, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_mask = cols < C
        out = _conv2_chunk(
            h_a, h_b, w2_ptr, b2_ptr, cols, col_mask, C, F32_DOT, BLOCK_T, BLOCK_A, BLOCK_B, BLOCK_N
        )
        _epilogue(
            out,
            cols,
            col_mask,
            row_mask[:, None] & col_mask[None, :],
            b * stride_ob + t[:, None] * C + cols[None, :],
            b * stride_xb + t[:, None] * C + cols[None, :],
            x_ptr,
            raw_ptr,
            act_ptr,
            freq2_ptr,
            inv2_ptr,
            C,
            True,
            EMIT_RAW,
            True,
            FAST_SIN,
        )


def split_width(channels: int) -> tuple[int, int]:
    """conv1's columns as two power-of-two parts (the second masked past `channels`): the
    largest power of two below the width and the rest, rounded up (tl.dot needs >= 16)."""
    first = max(16, 1 << (channels - 1).bit_length() - 1)
    rest = max(16, triton.next_power_of_2(max(1, channels - first)))
    return first, rest


Activation = tuple[torch.Tensor, torch.Tensor]  # (frequency, inverse_magnitude), each [C]


def _check_unit(
    x: torch.Tensor,
    x_act: torch.Tensor,
    history: torch.Tensor | None,
    w1: torch.Tensor,
    b1: torch.Tensor,
    act2: Activation,
    w2: torch.Tensor,
    b2: torch.Tensor,
    next_activation: Activation,
    dilation: int,
    who: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The unit's arguments checked (see `residual_unit`); x and x_act contiguous."""
    if w1.dim() != 3 or not w1.is_contiguous() or w1.shape[1] != w1.shape[2]:
        raise ValueError(f"{who}: w1 must be contiguous [taps, C, C], got {w1.shape}")
    taps, channels = w1.shape[0], w1.shape[2]
    if channels > MAX_CHANNELS:
        raise ValueError(f"{who}: {channels} channels > {MAX_CHANNELS} (one tile)")
    batch, length = x.shape[0], x.shape[1]
    shape = (batch, length, channels)
    x, x_act = x.contiguous(), x_act.contiguous()
    _check("x", x, shape, w1.dtype, who)
    _check("x_act", x_act, shape, w1.dtype, who)
    context = (taps - 1) * dilation
    if context > 0:
        if history is None:
            raise ValueError(f"{who}: a conv1 wider than one tap needs its history")
        _check("history", history, (batch, context, channels), x.dtype, who)
    if not w2.is_contiguous() or tuple(w2.shape) != (1, channels, channels):
        raise ValueError(f"{who}: w2 must be contiguous [1, C, C], got {w2.shape}")
    _check("w2", w2, (1, channels, channels), x.dtype, who)
    for name, vector in [("b1", b1), ("b2", b2), *zip(("act2", "act2"), act2, strict=True)]:
        _check(name, vector, (channels,), x.dtype, who)
    for vector in next_activation:
        _check("next_activation", vector, (channels,), x.dtype, who)
    return x, x_act


def _blocks(channels: int, config: ConvConfig | None) -> dict:
    """The kernels' block sizes and warps for a unit of `channels` (`TABLE` unless
    `config` overrides it)."""
    first, rest = split_width(channels)
    cfg = config if config is not None else config_for(channels)
    width = max(16, triton.next_power_of_2(channels))
    return dict(
        BLOCK_T=cfg.block_t,
        BLOCK_A=first,
        BLOCK_B=rest,
        BLOCK_N=min(cfg.block_n, width),
        BLOCK_K=min(cfg.block_k, width),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _f32_dot(x: torch.Tensor) -> bool:
    """Under the interpreter, bf16 dot operands go in as float32 (see conv1d._INTERPRETED)."""
    return x.dtype == torch.float32 or (_INTERPRETED and x.dtype == torch.bfloat16)


def residual_unit(
    x: torch.Tensor,
    x_act: torch.Tensor,
    history: torch.Tensor | None,
    w1: torch.Tensor,
    b1: torch.Tensor,
    act2: Activation,
    w2: torch.Tensor,
    b2: torch.Tensor,
    next_activation: Activation,
    *,
    emit_raw: bool = True,
    dilation: int = 1,
    config: ConvConfig | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """What these two calls of kernels/conv1d.py return, in one launch:

        _, h = causal_conv1d(x_act, w1, history, dilation=dilation, bias=b1,
                             activation=act2, emit_raw=False)
        return causal_conv1d(h, w2, bias=b2, residual=x, activation=next_activation,
                             emit_raw=emit_raw)

    x, x_act: [B, T, C] (the unit's input and its activation, conv1's input); history:
    [B, (taps-1)*dilation, C], conv1's input before x_act (rows may be strided); w1:
    [taps, C, C] and w2: [1, C, C] contiguous (CausalConv1d.kernel_weight); b1, b2 and
    the activations' factors [C]. C <= MAX_CHANNELS. All in x's dtype."""
    x, x_act = _check_unit(
        x, x_act, history, w1, b1, act2, w2, b2, next_activation, dilation, "residual_unit"
    )
    batch, length, channels = x.shape
    raw = conv1d._empty(x.shape, x) if emit_raw else None
    act = conv1d._empty(x.shape, x)
    if batch == 0 or length == 0:
        return raw, act
    blocks = _blocks(channels, config)
    grid = (triton.cdiv(length, blocks["BLOCK_T"]), batch)
    _residual_unit_kernel[grid](
        x,
        x_act,
        history if history is not None else x_act,  # unused pointer: any tensor
        w1,
        b1,
        act2[0],
        act2[1],
        w2,
        b2,
        raw if raw is not None else act,
        act,
        next_activation[0],
        next_activation[1],
        length,
        x.stride(0),
        x_act.stride(0),
        history.stride(0) if history is not None else 0,
        act.stride(0),
        C=channels,
        TAPS=w1.shape[0],
        DILATION=dilation,
        EMIT_RAW=emit_raw,
        F32_DOT=_f32_dot(x),
        FAST_SIN=not _INTERPRETED,
        **blocks,
    )
    return raw, act
