"""Causal 1-D convolutions of the codec decoder, channels-last, on tensor cores.

The codec decoder is a stack of causal convolutions over [B, T, C] activations whose time
axis grows 1920-fold; at large batch it is a compute problem (~5 GFLOP a frame) that cuDNN
ran in NCHW with transposes around each call, a non-tensor-core kernel for some shapes and
the activation as separate unvectorised kernels. Here every convolution is one implicit
GEMM: output rows are (stream, time) samples, columns output channels, and the reduction
runs over taps x input channels, tl.dot on tensor cores (bf16 in, float32 accumulate).

- History: a stream's left context (its last `(taps - 1) * dilation` input samples from the
  previous call) is read from its state row and the current input from x, two masked loads
  per tile: no concatenation. The caller keeps the new tail (a small copy).
- A transposed convolution with kernel 2*stride (or stride) is the same kernel with 2 taps
  (or 1) and stride*Cout output columns: output [B, T, s*Cout] is [B, T*s, Cout] by a free
  reshape (the caller lays the weight out so; see speech_tokenizer/rate12/convs.py).
- Epilogue: + bias, + residual, and the activation the *next* convolution's input needs
  (SnakeBeta: y + inv_magnitude * sin^2(y * frequency), per channel): each element is
  activated once, where it is produced, and the output is written raw, activated, or both
  (a residual unit needs both: the raw sum feeds the next residual, the activated one the
  next convolution).

Block sizes come from `TABLE`, measured on the GPU by bench/kernel_conv1d.py at 7d79071 per
(columns, input channels, taps), never from run-time autotuning: the codec is
captured in CUDA graphs at start-up. Unknown shapes get `default_config`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

# Triton's interpreter multiplies bf16 tl.dot operands as raw integers, so under it the
# operands go in as float32 (F32_DOT: exact products, float32 sums as on the tensor cores).
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class ConvConfig:
    block_t: int  # output samples of one stream per program
    block_n: int  # output columns per program
    block_k: int  # input channels per step of the reduction
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self):
        for name in ("block_t", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if min(self.block_t, self.block_n, self.block_k) < 16:
            raise ValueError("tl.dot needs block_t, block_n and block_k >= 16")


# (columns N, input channels, taps) -> (block_t, block_n, block_k, warps, stages), the
# fastest of bench/kernel_conv1d.py's sweep at 128 streams x 8 frames on the H100 (script
# and results at commit 7d79071: bench/results/h100-2026-11-23-issue12-s9-kernel_conv1d.json;
# a second sweep with smaller tiles, -s10-kernel_conv1d.json, changed only block2's conv1),
# with the kernel's time per
# call and, in brackets, cuDNN's channels-last convolution alone on the same problem.
TABLE: dict[tuple[int, int, int], tuple[int, int, int, int, int]] = {
    (192, 192, 7): (128, 256, 64, 8, 3),  # block3 ru.conv1 (192, k7): 823 us (898)
    (384, 384, 7): (256, 128, 64, 8, 3),  # block2 ru.conv1 (384, k7): 650 us (647; s10)
    (96, 96, 7): (128, 128, 64, 8, 3),  # block4 ru.conv1 (96, k7): 978 us (1056)
    (768, 768, 7): (128, 256, 64, 8, 3),  # block1 ru.conv1 (768, k7): 425 us (432)
    (96, 96, 1): (128, 64, 32, 4, 4),  # block4 ru.conv2 (96, k1): 568 us (812)
    (192, 192, 1): (64, 64, 32, 4, 4),  # block3 ru.conv2 (192, k1): 383 us (548)
    (384, 384, 1): (64, 128, 64, 4, 3),  # block2 ru.conv2 (384, k1): 218 us (283)
    (768, 768, 1): (64, 128, 64, 4, 3),  # block1 ru.conv2 (768, k1): 126 us (142)
    (1920, 768, 2): (128, 256, 64, 8, 3),  # block2 upsample 768->384 x5: 404 us (450)
    (768, 384, 2): (128, 256, 64, 8, 3),  # block3 upsample 384->192 x4: 491 us (657)
    (6144, 1536, 2): (64, 128, 64, 4, 3),  # block1 upsample 1536->768 x8: 753 us (292)
    (288, 192, 2): (128, 128, 64, 8, 3),  # block4 upsample 192->96 x3: 631 us (861)
    (1536, 1024, 7): (64, 128, 64, 4, 3),  # decoder.0 conv 1024->1536 k7: 416 us (165)
    (2048, 1024, 1): (64, 128, 64, 4, 3),  # upsample 1024 x2: 76 us (20)
    (1024, 512, 3): (64, 128, 64, 4, 3),  # pre_conv 512->1024 k3: 53 us (23)
    (1, 96, 7): (128, 16, 32, 4, 4),  # final conv 96->1 k7: 365 us (478)
}


def default_config(n: int, cin: int) -> ConvConfig:
    """A safe choice for shapes the table does not know: 128-sample tiles (wgmma-sized on
    Hopper), as many columns as the layer has up to 128, 64 channels a step."""
    block_n = max(16, min(128, triton.next_power_of_2(n)))
    block_k = max(16, min(64, triton.next_power_of_2(cin)))
    return ConvConfig(128, block_n, block_k, num_warps=8 if block_n >= 128 else 4)


@functools.cache
def config_for(n: int, cin: int, taps: int) -> ConvConfig:
    """The table's entry (measured once per shape: dilation changes only which rows a tile
    reads), else `default_config`."""
    entry = TABLE.get((n, cin, taps))
    return ConvConfig(*entry) if entry is not None else default_config(n, cin)


# The activation's sine is the GPU's hardware one (MUFU, `fast_sinf`, PTX sin.approx.f32) on
# the argument as it is, with no range reduction of our own. Its error on the H100
# (bench/snake_sine.py at 7d79071: max |fast_sinf(z)^2 - sin^2(z)|) is 4.6e-7 over |z| <= pi,
# 1.0e-5 over 100, 3.7e-5 over 315, 1.4e-4 over 1000: ~1.2e-7 |z|, the float32 rounding of
# the argument. A bf16 output rounds y = z / frequency by up to 2^-9 |y|, so the sine's
# error times the inverse magnitude is ~6e-5 x frequency x inverse_magnitude of that
# rounding: invisible. A reduction to [-pi/2, pi/2] (four more instructions an element)
# made the decoder 0.5 ms slower at 128 streams x 8 frames, its epilogues being
# arithmetic-bound; libdevice's exact `sin` spends ~20 instructions an element.
@triton.jit
def snake_sine(z, FAST_SIN: tl.constexpr):
    """sin(z) for SnakeBeta: the hardware sine, or tl.sin where Triton's interpreter runs
    (it has no libdevice)."""
    if FAST_SIN:
        s = libdevice.fast_sinf(z)
    else:
        s = tl.sin(z)
    return s


@triton.jit
def _snake(y, freq_ptr, inv_ptr, channels, col_mask, FAST_SIN: tl.constexpr):
    """SnakeBeta of float32 y [BLOCK_T, BLOCK_N] with per-column factors."""
    freq = tl.load(freq_ptr + channels, mask=col_mask, other=0.0).to(tl.float32)
    inv = tl.load(inv_ptr + channels, mask=col_mask, other=0.0).to(tl.float32)
    s = snake_sine(y * freq[None, :], FAST_SIN)
    return y + inv[None, :] * s * s


@triton.jit
def _tap_rows(
    x_base,
    s_base,
    t,
    tap,
    T,
    CIN: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
):
    """Where tap `tap` of output samples `t` of one stream reads its input: a pointer to
    each sample's row (from x_base, or for the `(TAPS - 1) * DILATION` before x from its
    state row s_base), and which rows exist (past T: masked)."""
    CONTEXT = (TAPS - 1) * DILATION
    src = t + tap * DILATION - CONTEXT  # input sample; negative: from the state row
    if CONTEXT > 0:
        # One load whose rows point into the state or into x: it feeds tl.dot
        # directly, so the pipeliner can prefetch it.
        rows = tl.where(src >= 0, x_base + src * CIN, s_base + (src + CONTEXT) * CIN)
    else:
        rows = x_base + src * CIN
    return rows, src < T


@triton.jit
def _input_tile(
    x_base,
    s_base,
    t,
    step,
    T,
    CIN: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Step `step` of the reduction over taps x channel tiles: the input [BLOCK_T, BLOCK_K]
    of output samples `t` of one stream (`_tap_rows`), and the weight rows it multiplies
    (their index in [TAPS * CIN] and mask)."""
    K_TILES = (CIN + BLOCK_K - 1) // BLOCK_K
    tap = step // K_TILES
    cin = (step % K_TILES) * BLOCK_K + tl.arange(0, BLOCK_K)
    cin_mask = cin < CIN
    rows, row_mask = _tap_rows(x_base, s_base, t, tap, T, CIN, TAPS, DILATION)
    a = tl.load(rows[:, None] + cin[None, :], mask=row_mask[:, None] & cin_mask[None, :], other=0.0)
    return a, tap * CIN + cin, cin_mask


@triton.jit
def _weight_tile(w_ptr, w_rows, w_row_mask, cols, col_mask, N: tl.constexpr):
    """Rows `w_rows` x columns `cols` of a weight [TAPS * CIN, N], zero where masked."""
    return tl.load(
        w_ptr + w_rows[:, None] * N + cols[None, :],
        mask=w_row_mask[:, None] & col_mask[None, :],
        other=0.0,
    )


@triton.jit
def _mma(a, w, acc, F32_DOT: tl.constexpr):
    if F32_DOT:
        return tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, w, acc)


@triton.jit
def _conv_tile(
    x_base,
    s_base,
    w_ptr,
    t,
    cols,
    col_mask,
    T,
    CIN: tl.constexpr,
    N: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    F32_DOT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """float32 [BLOCK_T, BLOCK_N]: output samples `t` of one stream, columns `cols` of a
    weight [TAPS, CIN, N], no bias (see `_input_tile`)."""
    acc = tl.zeros([BLOCK_T, BLOCK_N], dtype=tl.float32)
    # One loop over taps x channel tiles, so that the loads are pipelined across taps.
    for step in range(TAPS * ((CIN + BLOCK_K - 1) // BLOCK_K)):
        a, w_rows, w_row_mask = _input_tile(
            x_base, s_base, t, step, T, CIN, TAPS, DILATION, BLOCK_K
        )
        w = _weight_tile(w_ptr, w_rows, w_row_mask, cols, col_mask, N)
        acc = _mma(a, w, acc, F32_DOT)
    return acc


@triton.jit
def _outputs(
    acc,
    cols,
    col_mask,
    mask,
    res_offsets,
    res_ptr,
    out_ptr,
    freq_ptr,
    inv_ptr,
    ACT_CHANNELS: tl.constexpr,
    RESIDUAL: tl.constexpr,
    EMIT_ACT: tl.constexpr,
    FAST_SIN: tl.constexpr,
):
    """(acc (+ residual) rounded to out_ptr's dtype, with EMIT_ACT its SnakeBeta rounded
    too, else that rounded value again): where the eager path rounds, it stores the
    output and activates the stored tensor."""
    if RESIDUAL:
        # Masked lanes 0, not undefined: the head's tap product reads every lane.
        acc += tl.load(res_ptr + res_offsets, mask=mask, other=0.0).to(tl.float32)
    y = acc.to(out_ptr.dtype.element_ty)
    act = y
    if EMIT_ACT:
        act = _snake(y.to(tl.float32), freq_ptr, inv_ptr, cols % ACT_CHANNELS, col_mask, FAST_SIN)
        act = act.to(out_ptr.dtype.element_ty)
    return y, act


@triton.jit
def _epilogue(
    acc,
    cols,
    col_mask,
    mask,
    out_offsets,
    res_offsets,
    res_ptr,
    raw_ptr,
    act_ptr,
    freq_ptr,
    inv_ptr,
    ACT_CHANNELS: tl.constexpr,
    RESIDUAL: tl.constexpr,
    EMIT_RAW: tl.constexpr,
    EMIT_ACT: tl.constexpr,
    FAST_SIN: tl.constexpr,
):
    """Stores acc (+ residual) rounded to the output dtype and/or its SnakeBeta
    (`_outputs`; raw_ptr and act_ptr have one dtype)."""
    y, act = _outputs(
        acc,
        cols,
        col_mask,
        mask,
        res_offsets,
        res_ptr,
        raw_ptr,
        freq_ptr,
        inv_ptr,
        ACT_CHANNELS,
        RESIDUAL,
        EMIT_ACT,
        FAST_SIN,
    )
    if EMIT_RAW:
        tl.store(raw_ptr + out_offsets, y, mask=mask)
    if EMIT_ACT:
        tl.store(act_ptr + out_offsets, act, mask=mask)


# The length changes with the frame count: not specialised, so each layer compiles once
# for every (batch, frames) graph. The batch strides are (Triton specialises an integer
# only on being 1 or a multiple of 16, not on its value): knowing that every stream's rows
# start on 16 bytes is what lets it store the output and load the residual in 16-byte
# vectors instead of 2-byte elements.
@triton.jit(do_not_specialize=["T"])
def _causal_conv_kernel(
    x_ptr,
    state_ptr,
    w_ptr,
    bias_ptr,
    res_ptr,
    raw_ptr,
    act_ptr,
    freq_ptr,
    inv_ptr,
    T,
    stride_xb,
    stride_sb,
    stride_rb,
    stride_ob,
    CIN: tl.constexpr,
    N: tl.constexpr,
    ACT_CHANNELS: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    BIAS: tl.constexpr,
    RESIDUAL: tl.constexpr,
    EMIT_RAW: tl.constexpr,
    EMIT_ACT: tl.constexpr,
    F32_DOT: tl.constexpr,
    FAST_SIN: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # Column tiles of one row tile are neighbours: they share the input tile through L2.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    b = tl.program_id(2).to(tl.int64)
    col_mask = cols < N
    acc = _conv_tile(
        x_ptr + b * stride_xb,
        state_ptr + b * stride_sb,
        w_ptr,
        t,
        cols,
        col_mask,
        T,
        CIN,
        N,
        TAPS,
        DILATION,
        F32_DOT,
        BLOCK_T,
        BLOCK_N,
        BLOCK_K,
    )
    if BIAS:
        acc += tl.load(bias_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    mask = (t < T)[:, None] & col_mask[None, :]
    _epilogue(
        acc,
        cols,
        col_mask,
        mask,
        b * stride_ob + t[:, None] * N + cols[None, :],
        b * stride_rb + t[:, None] * N + cols[None, :],
        res_ptr,
        raw_ptr,
        act_ptr,
        freq_ptr,
        inv_ptr,
        ACT_CHANNELS,
        RESIDUAL,
        EMIT_RAW,
        EMIT_ACT,
        FAST_SIN,
    )


def _check(
    name: str,
    t: torch.Tensor,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    caller: str = "causal_conv1d",
) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"{caller}: {name} has shape {tuple(t.shape)}, expected {shape}")
    if t.dtype != dtype:
        raise ValueError(f"{caller}: {name} is {t.dtype}, expected {dtype} (x's dtype)")
    # Strides of dimensions of size 1 are never used (and torch leaves them arbitrary).
    if (shape[-1] > 1 and t.stride(-1) != 1) or (
        t.dim() == 3 and shape[1] > 1 and t.stride(1) != shape[-1]
    ):
        raise ValueError(f"{caller}: {name} must be contiguous per stream")


def _empty(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """An output buffer (the tests poison it with NaN to see every element written)."""
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    history: torch.Tensor | None = None,
    *,
    dilation: int = 1,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    activation: tuple[torch.Tensor, torch.Tensor] | None = None,
    emit_raw: bool = True,
    config: ConvConfig | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """y[b, t] = sum_tap cat(history, x)[b, t + tap * dilation] @ weight[tap] (+ bias)
    (+ residual), accumulated in float32; returns (y, snake(y)) as asked.

    x: [B, T, Cin]; weight: [taps, Cin, N] contiguous; history: [B, (taps-1)*dilation, Cin]
    (the input samples before x; rows may be strided, each contiguous), required when
    taps > 1; bias: [N]; residual: [B, T, N]; activation: (frequency, inverse_magnitude),
    each [C] with N a multiple of C (column j uses channel j % C). The first result is None
    unless `emit_raw`, the second None without `activation`. All in x's dtype. `config`
    overrides the table (the benchmark's sweep)."""
    if weight.dim() != 3 or not weight.is_contiguous():
        raise ValueError(
            f"causal_conv1d: weight must be contiguous [taps, Cin, N], got {weight.shape}"
        )
    taps, cin, n = weight.shape
    batch, length = x.shape[0], x.shape[1]
    x = x.contiguous()
    _check("x", x, (batch, length, cin), weight.dtype)
    context = (taps - 1) * dilation
    if context > 0:
        if history is None:
            raise ValueError("causal_conv1d: a kernel wider than one tap needs its history")
        _check("history", history, (batch, context, cin), x.dtype)
    if bias is not None:
        _check("bias", bias, (n,), x.dtype)
    if residual is not None:
        _check("residual", residual, (batch, length, n), x.dtype)
    act_channels = n
    if activation is not None:
        frequency, inverse_magnitude = activation
        act_channels = frequency.shape[0]
        if n % act_channels:
            raise ValueError(f"causal_conv1d: {n} columns are not a multiple of {act_channels}")
        _check("frequency", frequency, (act_channels,), x.dtype)
        _check("inverse_magnitude", inverse_magnitude, (act_channels,), x.dtype)
    elif not emit_raw:
        raise ValueError("causal_conv1d: nothing to emit")
    raw = _empty((batch, length, n), x) if emit_raw else None
    act = _empty((batch, length, n), x) if activation is not None else None
    if batch == 0 or length == 0:
        return raw, act
    cfg = config if config is not None else config_for(n, cin, taps)
    out_any = raw if raw is not None else act
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(length, cfg.block_t), batch)
    # Under the interpreter, bf16 dot operands go in as float32 (see _INTERPRETED).
    f32_dot = x.dtype == torch.float32 or (_INTERPRETED and x.dtype == torch.bfloat16)
    _causal_conv_kernel[grid](
        x,
        history if history is not None else x,  # unused pointers: any tensor
        weight,
        bias if bias is not None else weight,
        residual if residual is not None else out_any,
        raw if raw is not None else out_any,
        act if act is not None else out_any,
        activation[0] if activation is not None else weight,
        activation[1] if activation is not None else weight,
        length,
        x.stride(0),
        history.stride(0) if history is not None else 0,
        residual.stride(0) if residual is not None else 0,
        out_any.stride(0),
        CIN=cin,
        N=n,
        ACT_CHANNELS=act_channels,
        TAPS=taps,
        DILATION=dilation,
        BIAS=bias is not None,
        RESIDUAL=residual is not None,
        EMIT_RAW=emit_raw,
        EMIT_ACT=activation is not None,
        F32_DOT=f32_dot,
        FAST_SIN=not _INTERPRETED,
        BLOCK_T=cfg.block_t,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return raw, act


# A depthwise convolution's tile: samples x channels, one program per tile and stream.
DEPTHWISE_BLOCK_T = 16
DEPTHWISE_BLOCK_C = 256


@triton.jit(do_not_specialize=["T"])
def _depthwise_kernel(
    x_ptr,
    state_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    T,
    stride_xb,
    stride_sb,
    C: tl.constexpr,
    TAPS: tl.constexpr,
    DILATION: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    b = tl.program_id(2).to(tl.int64)
    c_mask = c < C
    acc = tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32)
    acc += tl.load(bias_ptr + c, mask=c_mask, other=0.0).to(tl.float32)[None, :]
    for tap in tl.static_range(TAPS):
        rows, row_mask = _tap_rows(
            x_ptr + b * stride_xb, state_ptr + b * stride_sb, t, tap, T, C, TAPS, DILATION
        )
        a = tl.load(rows[:, None] + c[None, :], mask=row_mask[:, None] & c_mask[None, :])
        w = tl.load(w_ptr + tap * C + c, mask=c_mask, other=0.0)
        acc += a.to(tl.float32) * w.to(tl.float32)[None, :]
    mask = (t < T)[:, None] & c_mask[None, :]
    tl.store(
        out_ptr + (b * T + t[:, None]) * C + c[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask
    )


def depthwise_causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    history: torch.Tensor,
    *,
    bias: torch.Tensor,
    dilation: int = 1,
) -> torch.Tensor:
    """y[b, t, c] = bias[c] + sum_tap cat(history, x)[b, t + tap * dilation, c] * weight[tap, c],
    accumulated in float32, in one launch: the history read where it is, no concatenation.

    x: [B, T, C]; weight: [taps, C] contiguous (a depthwise CausalConv1d's kernel_weight
    [taps, 1, C] without its middle axis); history: [B, (taps-1)*dilation, C] (rows may be
    strided); bias: [C]. All in x's dtype; returns [B, T, C]."""
    who = "depthwise_causal_conv1d"
    if weight.dim() != 2 or not weight.is_contiguous():
        raise ValueError(f"{who}: weight must be contiguous [taps, C], got {weight.shape}")
    taps, channels = weight.shape
    if taps < 2:
        raise ValueError(f"{who}: a one-tap depthwise convolution is a scale, not supported")
    batch, length = x.shape[0], x.shape[1]
    x = x.contiguous()
    _check("x", x, (batch, length, channels), weight.dtype, who)
    _check("history", history, (batch, (taps - 1) * dilation, channels), x.dtype, who)
    _check("bias", bias, (channels,), x.dtype, who)
    out = _empty((batch, length, channels), x)
    if batch == 0 or length == 0:
        return out
    grid = (
        triton.cdiv(channels, DEPTHWISE_BLOCK_C),
        triton.cdiv(length, DEPTHWISE_BLOCK_T),
        batch,
    )
    _depthwise_kernel[grid](
        x,
        history,
        weight,
        bias,
        out,
        length,
        x.stride(0),
        history.stride(0),
        C=channels,
        TAPS=taps,
        DILATION=dilation,
        BLOCK_T=DEPTHWISE_BLOCK_T,
        BLOCK_C=DEPTHWISE_BLOCK_C,
    )
    return out
