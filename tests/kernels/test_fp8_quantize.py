"""The fp8 input kernel (kernels/fp8_quantize.py) against its eager definition:
model/fp8.py's `quantize_rows` of the prologue's eager output (rms_norm_eager,
silu_mul_eager), on strided rows. Runs on the GPU when there is one, else in Triton's
interpreter (TRITON_INTERPRET=1), which truncates where the GPU rounds bf16."""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels.fp8_quantize import quantize_rows as quantize_kernel
from ttsfleet_runtime.model.fp8 import quantize_rows
from ttsfleet_runtime.model.layers import rms_norm_eager, silu_mul_eager

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-6


def inputs(dtype, rows=5, width=300):
    g = torch.Generator().manual_seed(1)
    wide = (torch.randn(rows, 3 * width, generator=g) * 3).to(dtype).to(DEVICE)
    norm = torch.randn(width, generator=g).to(dtype).to(DEVICE)
    return wide, norm


def prologues(wide, norm, width=300):
    """(name, kernel keyword arguments, the kernel's x, the eager input to quantize)."""
    x = wide[:, :width]  # strided rows, as the decoder layers pass them
    gated = wide[:, : 2 * width]
    return [
        ("plain", {}, x, x),
        ("norm", dict(norm_weight=norm, eps=EPS), x, rms_norm_eager(x, norm, EPS)),
        ("gated", dict(gated=True), gated, silu_mul_eager(gated)),
    ]


@pytest.mark.parametrize("prologue", ["plain", "norm", "gated"])
def test_float32_rows_get_the_eager_codes_and_scales(prologue):
    wide, norm = inputs(torch.float32)
    ((_, kwargs, x, eager),) = [p for p in prologues(wide, norm) if p[0] == prologue]
    codes, scale = quantize_kernel(x, **kwargs)
    want_codes, want_scale = quantize_rows(eager)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (5, 1)
    assert torch.allclose(scale, want_scale, rtol=1e-6)
    assert torch.equal(codes.float(), want_codes.float())


@pytest.mark.parametrize("prologue", ["plain", "norm", "gated"])
def test_bf16_rows_dequantize_to_the_eager_input(prologue):
    wide, norm = inputs(torch.bfloat16)
    ((_, kwargs, x, eager),) = [p for p in prologues(wide, norm) if p[0] == prologue]
    codes, scale = quantize_kernel(x, **kwargs)
    want_codes, want_scale = quantize_rows(eager)
    assert torch.allclose(scale, want_scale, rtol=2e-2)
    got, want = codes.float() * scale, want_codes.float() * want_scale
    # e4m3 keeps 3 mantissa bits: the two quantizations agree within rounding.
    assert ((got - want).norm() / want.norm()).item() < 3e-2


def test_a_row_of_zeros_gets_zero_codes_not_nan():
    codes, scale = quantize_kernel(torch.zeros(2, 64, device=DEVICE))
    assert torch.equal(codes.float(), torch.zeros(2, 64, device=DEVICE))
    assert (scale > 0).all()
