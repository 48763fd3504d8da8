"""Which implementation the model's hot operations run on: eager torch (CPU,
and the reference), or fused GPU kernels.

A decode step is ~100 decoder layers (28 talker + 15 predictor passes x 5)
plus 16 samples; inside a CUDA graph the number of kernels and their choice,
not their launch, set the time. `enable()` rebinds the operations the model
calls through module attributes:

- `layers.linear`: the Triton small-batch product (`kernels/linear.py`) with
  the input norm or SiLU gate and the residual fused in, where its table says
  it beats cuBLAS for that (M, N, K); otherwise cuBLAS with the surrounding
  elementwise work in the row kernels;
- `layers.qk_norm_rope_write`, `layers.decode_attention`: Triton kernels that
  read each row's position from device memory (one graph per batch bucket);
- `sample`: one Triton kernel per call, no sort (the talker's processors
  fused in);
- the remaining helpers (`rms_norm`, `qk_norm_rope` for prefill, `silu_mul`):
  Triton row kernels (`kernels/row_ops.py`). No torch.compile: importing
  Dynamo and Inductor and loading their graphs cost a start about 9 s.

`use_eager()` puts everything back (tests). Same math either way, within
float rounding: tests/kernels compare each kernel with its eager definition.
"""

from __future__ import annotations

import logging

from ..model import layers as _layers
from . import sampling as _sampling

log = logging.getLogger(__name__)

# Call sites use these names; enable() rebinds them.
sample = _sampling.sample
_enabled = False
_EAGER = {
    name: getattr(_layers, name)
    for name in (
        "linear",
        "qk_norm_rope_write",
        "decode_attention",
        "rms_norm",
        "qk_norm_rope",
        "silu_mul",
    )
}


def enable() -> None:
    """Bind the GPU kernels."""
    global _enabled
    if _enabled:
        return
    bind_kernels()
    _enabled = True
    log.info("fused kernels enabled")


def bind_kernels() -> None:
    global sample
    from ..kernels import decode_attention, rope_kv, row_ops
    from ..kernels import linear as kernel_linear
    from ..kernels import sampling as kernel_sampling

    sample = kernel_sampling.sample
    _layers.linear = _linear_op(kernel_linear)
    _layers.qk_norm_rope_write = rope_kv.qk_norm_rope_write
    _layers.decode_attention = decode_attention.decode_attention
    _layers.rms_norm = row_ops.rms_norm
    _layers.qk_norm_rope = row_ops.qk_norm_rope
    _layers.silu_mul = row_ops.silu_mul


def use_eager() -> None:
    """Undo enable(): every operation back to its eager definition."""
    global sample, _enabled
    for name, fn in _EAGER.items():
        setattr(_layers, name, fn)
    sample = _sampling.sample
    _enabled = False


def _linear_op(kernel_linear):
    """The Triton product where its table says it beats cuBLAS for that
    (rows, N, K); cuBLAS with the row kernels around it elsewhere
    (prefill, large batches, load-time products)."""
    composition = _EAGER["linear"]

    def linear(x, weight, *, bias=None, residual=None, norm_weight=None, eps=1e-6, gated=False):
        rows = x.numel() // x.shape[-1]
        if kernel_linear.beats_cublas(rows, *weight.shape):
            return kernel_linear.linear(
                x,
                weight,
                bias=bias,
                residual=residual,
                norm_weight=norm_weight,
                eps=eps,
                gated=gated,
            )
        return composition(
            x, weight, bias=bias, residual=residual, norm_weight=norm_weight, eps=eps, gated=gated
        )

    return linear
