"""The input of an fp8 product in one kernel: the prologue, the row's scale, the e4m3 codes.

With fp8 weights (model/fp8.py) each product's input is quantized per row before
torch._scaled_mm reads it. In torch that is ~7 kernels (cast, abs, amax, divide, clamp,
clamp, cast) after the prologue's own (the input RMSNorm or the SiLU gate): ~400
products a decode step would add thousands of kernels, which inside a CUDA graph cost
more than the bytes fp8 saves. This kernel does it in one: one program a row, a pass for
the norm's mean of squares (when `norm_weight`), a pass for the row's largest magnitude,
a pass that writes the codes (x is a few KiB a row, in L2 after the first pass).

The prologue rounds as the eager functions round (kernels/linear.py's `_load_input`), so
the codes are those of `quantize_rows(rms_norm_eager(x, ...))` or of
`quantize_rows(silu_mul_eager(x))`, within float rounding.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .linear import _load_input, _row_rstd

# Globals a kernel reads must be constexpr (Triton refuses plain ones on the GPU).
FP8_MAX = tl.constexpr(448.0)  # e4m3fn's largest finite value
MIN_SCALE = tl.constexpr(1e-12)  # an all-zero row's scale: its codes are 0, not NaN
BLOCK_K = 1024
# Triton's interpreter converts float32 to e4m3 wrongly (-125.1 became -64, not -128):
# under it the kernel writes the clamped float32 values and torch rounds them to e4m3.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# M unspecialised: one compile serves every batch bucket (no compile inside a graph capture).
@triton.jit(do_not_specialize=["M"])
def _quantize_rows_kernel(
    x_ptr,
    nw_ptr,
    codes_ptr,
    scale_ptr,
    M,
    K,
    stride_xm,
    eps,
    NORM: tl.constexpr,
    GATED: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) + tl.arange(0, 1)
    row_mask = rows < M
    rstd = tl.zeros([1], dtype=tl.float32)
    if NORM:
        rstd = _row_rstd(x_ptr, rows, row_mask, stride_xm, K, eps, 1, BLOCK_K)
    amax = tl.zeros([1], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_mask = cols < K
        x = _load_input(
            x_ptr,
            nw_ptr,
            rows[:, None],
            cols[None, :],
            row_mask[:, None] & col_mask[None, :],
            col_mask[None, :],
            stride_xm,
            K,
            rstd[:, None],
            NORM,
            GATED,
        )
        amax = tl.maximum(amax, tl.max(tl.abs(x.to(tl.float32)), axis=1))
    scale = tl.maximum(tl.math.div_rn(amax, FP8_MAX), MIN_SCALE)
    tl.store(scale_ptr + rows, scale, mask=row_mask)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_mask = cols < K
        mask = row_mask[:, None] & col_mask[None, :]
        x = _load_input(
            x_ptr,
            nw_ptr,
            rows[:, None],
            cols[None, :],
            mask,
            col_mask[None, :],
            stride_xm,
            K,
            rstd[:, None],
            NORM,
            GATED,
        )
        # div_rn: IEEE division as torch divides (Triton's `/` is approximate on the GPU).
        q = tl.math.div_rn(x.to(tl.float32), scale[:, None])
        q = tl.minimum(tl.maximum(q, -FP8_MAX), FP8_MAX)
        tl.store(
            codes_ptr + rows[:, None] * K + cols[None, :],
            q.to(codes_ptr.dtype.element_ty),
            mask=mask,
        )


def quantize_rows(
    x: torch.Tensor,
    *,
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    gated: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """prologue(x) [M, K] -> (e4m3 codes [M, K], float32 scales [M, 1]) with each row's
    largest magnitude at 448. x: [M, K] (or [M, 2K] when `gated`), rows may be strided,
    the last dimension contiguous. prologue: `rms_norm_eager(x, norm_weight, eps)` when
    norm_weight is given, `silu_mul_eager(x)` when gated (not both)."""
    if norm_weight is not None and gated:
        raise ValueError("quantize_rows: norm_weight and gated are exclusive")
    if x.dim() != 2 or x.stride(-1) != 1:
        raise ValueError("quantize_rows: x must be [M, K] with a contiguous last dimension")
    m = x.shape[0]
    k = x.shape[1] // 2 if gated else x.shape[1]
    code_dtype = torch.float32 if _INTERPRETED else torch.float8_e4m3fn
    codes = torch.empty((m, k), dtype=code_dtype, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m == 0:
        return codes, scale
    if norm_weight is not None:
        norm_weight = norm_weight.contiguous()
    _quantize_rows_kernel[(m,)](
        x,
        norm_weight if norm_weight is not None else x,  # unused pointer: any tensor
        codes,
        scale,
        m,
        k,
        x.stride(0),
        eps,
        NORM=norm_weight is not None,
        GATED=gated,
        BLOCK_K=BLOCK_K,
    )
    return codes.to(torch.float8_e4m3fn), scale
