"""Which implementation the talker's and the code predictor's hot operations run on:
eager torch (CPU, and the reference) or fused GPU kernels, as one immutable `TalkerOps`
handed to the modules (`ModelRunner` stores its own on the model it runs). Nothing here
is process-wide: two models in one process may run on different operations.

A decode step is ~100 decoder layers (28 talker + 15 predictor passes x 5) plus 16
samples; inside a CUDA graph the number of kernels and their choice, not their launch,
set the time. `fused()` gives:

- `linear`: the Triton small-batch product (`kernels/linear.py`) with the input norm or
  SiLU gate and the residual fused in, where its table says it beats cuBLAS for that
  (M, N, K); otherwise cuBLAS with the surrounding elementwise work in the row kernels;
  fp8 weights (`--weights fp8`, model/fp8.py): the same Triton kernel reading e4m3 codes
  (weight-only fp8) for a few rows, or torch._scaled_mm after the input's
  quantization kernel (`kernels/fp8_quantize.py`) from the
  `linear_table.FP8_SCALED_MM_FROM` bucket on, where it measured faster;
- `qk_norm_rope_write`, `decode_attention`: Triton kernels that read each row's
  position from device memory (one graph per batch bucket);
- `sample`: one Triton kernel per call, no sort (the talker's processors fused in);
- the remaining helpers (`rms_norm`, `qk_norm_rope` for prefill, `silu_mul`): Triton
  row kernels (`kernels/row_ops.py`). No torch.compile: importing Dynamo and Inductor
  and loading their graphs cost a start about 9 s.

Same math either way, within float rounding: tests/kernels compare each kernel with its
eager definition. The modules call `self.ops.linear(...)`: inside a CUDA graph the call
is captured once; eagerly an attribute lookup costs what a module global did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from . import layers, sampling
from .fp8 import Fp8Weight


@dataclasses.dataclass(frozen=True)
class TalkerOps:
    """The operations a decoder stack and its sampling call; see the module docstring."""

    linear: Callable
    qk_norm_rope_write: Callable
    decode_attention: Callable
    rms_norm: Callable
    qk_norm_rope: Callable
    silu_mul: Callable
    sample: Callable


EAGER = TalkerOps(
    linear=layers.linear_eager,
    qk_norm_rope_write=layers.qk_norm_rope_write_eager,
    decode_attention=layers.decode_attention_eager,
    rms_norm=layers.rms_norm_eager,
    qk_norm_rope=layers.qk_norm_rope_eager,
    silu_mul=layers.silu_mul_eager,
    sample=sampling.sample,
)


def for_device(device: str, cuda_graphs: bool) -> TalkerOps:
    """The fused kernels for a GPU that runs the decode step in CUDA graphs (inside a
    graph, time goes to the number of kernels, thousands a step, not to launching
    them), eager torch elsewhere."""
    return fused() if cuda_graphs and torch.device(device).type == "cuda" else EAGER


def fused() -> TalkerOps:
    """The GPU kernels (Triton; on a CPU only in Triton's interpreter, for tests)."""
    from ..kernels import decode_attention, fp8_quantize, linear_table, rope_kv, row_ops
    from ..kernels import linear as kernel_linear
    from ..kernels import sampling as kernel_sampling

    return TalkerOps(
        linear=_linear_op(
            kernel_linear, linear_table, row_ops.rms_norm, row_ops.silu_mul, fp8_quantize
        ),
        qk_norm_rope_write=rope_kv.qk_norm_rope_write,
        decode_attention=decode_attention.decode_attention,
        rms_norm=row_ops.rms_norm,
        qk_norm_rope=row_ops.qk_norm_rope,
        silu_mul=row_ops.silu_mul,
        sample=kernel_sampling.sample,
    )


def _linear_op(
    kernel_linear, linear_table, rms_norm: Callable, silu_mul: Callable, fp8_quantize
) -> Callable:
    """The Triton product where its table says it beats cuBLAS for that (rows, N, K);
    cuBLAS with the row kernels around it elsewhere (prefill, large batches, load-time
    products). fp8 weights: the kernel on the e4m3 codes and their scales; where the table
    says _scaled_mm wins, the input's prologue and quantization in one kernel, then
    _scaled_mm, then bias and residual."""

    def linear(x, weight, *, bias=None, residual=None, norm_weight=None, eps=1e-6, gated=False):
        rows = x.numel() // x.shape[-1]
        if isinstance(weight, Fp8Weight) and not linear_table.fp8_scaled_mm_wins(
            rows, *weight.shape
        ):
            return kernel_linear.linear(
                x,
                weight.codes,
                weight_scale=weight.scale,
                bias=bias,
                residual=residual,
                norm_weight=norm_weight,
                eps=eps,
                gated=gated,
            )
        if isinstance(weight, Fp8Weight):
            lead = x.shape[:-1]
            codes, scale = fp8_quantize.quantize_rows(
                x.reshape(-1, x.shape[-1]), norm_weight=norm_weight, eps=eps, gated=gated
            )
            y = weight.product(codes, scale, x.dtype).reshape(*lead, -1)
            if bias is not None:
                y = y + bias
            return y if residual is None else residual + y
        if linear_table.beats_cublas(rows, *weight.shape):
            return kernel_linear.linear(
                x,
                weight,
                bias=bias,
                residual=residual,
                norm_weight=norm_weight,
                eps=eps,
                gated=gated,
            )
        return layers.linear_eager(
            x,
            weight,
            bias=bias,
            residual=residual,
            norm_weight=norm_weight,
            eps=eps,
            gated=gated,
            rms_norm=rms_norm,
            silu_mul=silu_mul,
        )

    return linear
