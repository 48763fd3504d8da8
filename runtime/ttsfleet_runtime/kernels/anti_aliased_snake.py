"""The 25 Hz vocoder's anti-aliased SnakeBeta in one pass: upsample 2x, activate, low-pass
and downsample 2x, each output sample from its input samples in registers.

In torch (speech_tokenizer/rate25/vocoder.py, `AntiAliasedSnake`) the activation is nine
kernels, each a round trip through memory of a tensor twice the input's length:
replicate padding, a grouped transposed convolution (the upsampling filter), a crop, the
four elementwise kernels of SnakeBeta, padding again and a depthwise convolution (the
downsampling filter). On an H200 at 128 streams those were ~1.0 s of the vocoder's
1.4 s of kernels a call (bench/results/profile_step-25hz.json): cuDNN runs the grouped
transposed convolution as a slow grouped dgrad kernel. Here one program computes a tile
of output samples of one channel: each output reads the 12 taps of the downsampling
filter from the upsampled, activated signal, and each of those samples is the 6 taps of
the upsampling filter that land on it (stride 2), from the input with its edges
replicated. The activated samples are recomputed for each output that reads them (6x)
instead of going through memory. Away from the edges each pair of downsampling taps
shares six input loads at fixed offsets; a tile near an edge clamps every index as the
two paddings do (the first kernel, which clamped everywhere, spent 323 ms of a 128-stream
call on index arithmetic).

Float32 math, one rounding per output. On a CPU the vocoder keeps the torch path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .conv1d import _INTERPRETED, snake_sine

_BLOCK_T = 256  # output samples of one channel per program
_NUM_WARPS = 2


@triton.jit
def _snake(up, freq, inv, FAST_SIN: tl.constexpr):
    s = snake_sine(up * freq, FAST_SIN)  # why the hardware sine: kernels/conv1d.py
    return up + inv * s * s


@triton.jit(do_not_specialize=["T", "C"])
def _anti_aliased_snake_kernel(
    x_ptr,
    y_ptr,
    lowpass_ptr,
    freq_ptr,
    inv_ptr,
    T,
    C,
    TAPS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    FAST_SIN: tl.constexpr,
):
    row = tl.program_id(0)  # batch * C + channel, of a contiguous [B, C, T]
    t0 = tl.program_id(1) * BLOCK_T
    t = t0 + tl.arange(0, BLOCK_T)
    x_row = x_ptr + row.to(tl.int64) * T
    channel = row % C
    freq = tl.load(freq_ptr + channel).to(tl.float32)
    inv = tl.load(inv_ptr + channel).to(tl.float32)
    HALF: tl.constexpr = TAPS // 2
    UP_PAD: tl.constexpr = HALF - 1  # replicated input samples before the upsampling
    CROP: tl.constexpr = 2 * UP_PAD + (TAPS - 2) // 2  # upsampled samples cropped in front
    acc = tl.zeros([BLOCK_T], dtype=tl.float32)
    if (t0 >= HALF) & (t0 + BLOCK_T + HALF <= T):
        # Inside the signal no edge is replicated: downsampling taps 2a and 2a + 1 read
        # the upsampled samples whose upsampling taps (even, odd) read inputs t + a - i,
        # so each pair of down taps shares its six input loads.
        for a in tl.static_range(HALF):
            up_even = tl.zeros([BLOCK_T], dtype=tl.float32)
            up_odd = tl.zeros([BLOCK_T], dtype=tl.float32)
            for i in tl.static_range(HALF):
                sample = tl.load(x_row + t + (a - i)).to(tl.float32)
                up_even += tl.load(lowpass_ptr + 2 * i) * sample
                up_odd += tl.load(lowpass_ptr + 2 * i + 1) * sample
            acc += tl.load(lowpass_ptr + 2 * a) * _snake(2.0 * up_even, freq, inv, FAST_SIN)
            acc += tl.load(lowpass_ptr + 2 * a + 1) * _snake(2.0 * up_odd, freq, inv, FAST_SIN)
    else:
        # Near an edge: every index clamped as the padding replicates (both paddings).
        for j in tl.static_range(TAPS):
            # Downsampling tap j reads sample m of the activated 2x signal.
            m = tl.minimum(tl.maximum(2 * t + (j - (HALF - 1)), 0), 2 * T - 1)
            # Sample m is output n of the transposed convolution: the taps of n's parity.
            n = m + CROP
            parity = n % 2
            first = (n - parity) // 2 - UP_PAD  # the input sample of its first tap
            up = tl.zeros([BLOCK_T], dtype=tl.float32)
            for i in tl.static_range(HALF):
                even = tl.load(lowpass_ptr + 2 * i)
                odd = tl.load(lowpass_ptr + 2 * i + 1)
                src = tl.minimum(tl.maximum(first - i, 0), T - 1)
                sample = tl.load(x_row + src).to(tl.float32)
                up += tl.where(parity == 0, even, odd) * sample
            acc += tl.load(lowpass_ptr + j) * _snake(2.0 * up, freq, inv, FAST_SIN)
    tl.store(y_ptr + row.to(tl.int64) * T + t, acc.to(y_ptr.dtype.element_ty), mask=t < T)


def _empty(like: torch.Tensor) -> torch.Tensor:
    """The output buffer (the tests poison it with NaN to see every element written)."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)


def anti_aliased_snake(
    x: torch.Tensor,
    lowpass: torch.Tensor,
    frequency: torch.Tensor,
    inverse_magnitude: torch.Tensor,
) -> torch.Tensor:
    """SnakeBeta at twice the rate of x [B, C, T]: `lowpass` [taps] (float32) the filter of
    both the 2x upsampling (gain 2) and the downsampling; `frequency` and
    `inverse_magnitude` [C] the activation's factors. -> [B, C, T] in x's dtype."""
    batch, channels, length = x.shape
    if length == 0 or batch * channels == 0:
        return x.clone()
    x = x.contiguous()
    y = _empty(x)
    taps = lowpass.numel()
    if taps % 2:
        raise ValueError(f"anti_aliased_snake: the filter needs an even number of taps, not {taps}")
    grid = (batch * channels, triton.cdiv(length, _BLOCK_T))
    _anti_aliased_snake_kernel[grid](
        x,
        y,
        lowpass.reshape(-1).float().contiguous(),
        frequency.contiguous(),
        inverse_magnitude.contiguous(),
        length,
        channels,
        TAPS=taps,
        BLOCK_T=_BLOCK_T,
        FAST_SIN=not _INTERPRETED,
        num_warps=_NUM_WARPS,
    )
    return y
