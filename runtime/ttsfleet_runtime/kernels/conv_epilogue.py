"""The epilogue of a codec convolution computed by cuDNN: + residual, SnakeBeta, one pass.

cuDNN's convolution ends at its bias; what the codec needs after it (the residual of a
residual unit, the SnakeBeta activation the next convolution's input needs, the raw sum
and/or its activation) would be four to six torch elementwise kernels in bf16, each a
round trip through memory. Here it is one kernel over the channels-last output
[rows, N] (float32 math, one rounding per output): column j uses channel j % C of the
activation, so the [B, T, s*Cout] output of a transposed convolution needs no reshape.

On a CPU the codec does the same in torch (speech_tokenizer/rate12/convs.py, `_epilogue_torch`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .conv1d import _INTERPRETED, _epilogue

_TILE_ELEMENTS = 4096  # per program: 32 per thread with 4 warps


@triton.jit(do_not_specialize=["rows"])
def _snake_epilogue_kernel(
    y_ptr,
    res_ptr,
    raw_ptr,
    act_ptr,
    freq_ptr,
    inv_ptr,
    rows,
    N: tl.constexpr,
    ACT_CHANNELS: tl.constexpr,
    RESIDUAL: tl.constexpr,
    EMIT_RAW: tl.constexpr,
    EMIT_ACT: tl.constexpr,
    FAST_SIN: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    mask = (r < rows)[:, None] & col_mask[None, :]
    offsets = r[:, None] * N + cols[None, :]
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    # The Triton convolution's own epilogue: + residual, rounded, raw and/or activated.
    _epilogue(
        y,
        cols,
        col_mask,
        mask,
        offsets,
        offsets,
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


def _empty(like: torch.Tensor) -> torch.Tensor:
    """An output buffer (the tests poison it with NaN to see every element written)."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)


def _block_n(n: int) -> int:
    """Columns per program: the largest power of two up to 128 that divides N (no masked
    columns, full vectors), else N's next power of two capped at 128."""
    for block in (128, 64, 32, 16, 8):
        if n % block == 0:
            return block
    return min(128, triton.next_power_of_2(n))


def snake_epilogue(
    y: torch.Tensor,
    residual: torch.Tensor | None,
    activation: tuple[torch.Tensor, torch.Tensor] | None,
    emit_raw: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(y + residual if emit_raw, snake(y + residual) if activation) of a convolution's
    output y [..., N] (rows contiguous); residual like y; activation (frequency,
    inverse_magnitude), each [C] with N a multiple of C. Without a residual the raw
    result is y itself (not copied)."""
    if activation is None and residual is None:
        return (y if emit_raw else None), None
    n = y.shape[-1]
    if not y.is_contiguous() or (residual is not None and residual.shape != y.shape):
        raise ValueError("snake_epilogue: y must be contiguous and residual shaped like it")
    if residual is not None:
        residual = residual.contiguous()
    write_raw = emit_raw and residual is not None
    raw = _empty(y) if write_raw else None
    act = _empty(y) if activation is not None else None
    act_channels = activation[0].shape[0] if activation is not None else n
    if n % act_channels:
        raise ValueError(f"snake_epilogue: {n} columns are not a multiple of {act_channels}")
    rows = y.numel() // max(n, 1)
    if rows:
        block_n = _block_n(n)
        block_r = max(1, _TILE_ELEMENTS // block_n)
        out_any = raw if raw is not None else act
        grid = (triton.cdiv(rows, block_r), triton.cdiv(n, block_n))
        _snake_epilogue_kernel[grid](
            y,
            residual if residual is not None else y,  # unused pointers: any tensor
            raw if raw is not None else out_any,
            act if act is not None else out_any,
            activation[0] if activation is not None else y,
            activation[1] if activation is not None else y,
            rows,
            N=n,
            ACT_CHANNELS=act_channels,
            RESIDUAL=residual is not None,
            EMIT_RAW=write_raw,
            EMIT_ACT=activation is not None,
            FAST_SIN=not _INTERPRETED,
            BLOCK_R=block_r,
            BLOCK_N=block_n,
            num_warps=4,
        )
    if emit_raw and not write_raw:
        raw = y
    return raw, act
