"""Which implementation the model's hot operations run on: eager torch (CPU,
and the reference), or fused GPU kernels.

A decode step is ~100 decoder layers (28 talker + 15 predictor passes x 5)
plus 16 samples; inside a CUDA graph the number of kernels and their choice,
not their launch, set the time. `enable()` rebinds the operations the model
calls through module attributes:

- `layers.linear`: the Triton small-batch product (`kernels/linear.py`) with
  the input norm or SiLU gate and the residual fused in, where its table says
  it beats cuBLAS for that (M, N, K); otherwise cuBLAS with the surrounding
  elementwise work compiled;
- `layers.qk_norm_rope_write`, `layers.decode_attention`: Triton kernels that
  read each row's position from device memory (one graph per batch bucket);
- `sample`: one Triton kernel per call, no sort (the talker's processors
  fused in);
- the remaining helpers (`rms_norm`, `qk_norm_rope` for prefill, `silu_mul`)
  compiled by torch.compile (dynamic shapes: one compile for every bucket).

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


def enable(compile_helpers: bool = True) -> None:
    """Bind the GPU kernels (and compile the remaining helpers)."""
    global _enabled
    if _enabled:
        return
    if compile_helpers:
        _compile_helpers()
    bind_kernels()
    _enabled = True
    log.info("fused kernels enabled", extra={"compiled_helpers": compile_helpers})


def _compile_helpers() -> None:
    import torch
    import torch._dynamo

    # A function that fails to compile runs eagerly instead of failing the engine.
    torch._dynamo.config.suppress_errors = True
    # Sizes 1 (batch 1, one query position) are specialised by dynamo: each
    # function sees a handful of shape families (talker/predictor, prefill/decode).
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    opts = dict(dynamic=True, fullgraph=False)
    _layers.rms_norm = torch.compile(_EAGER["rms_norm"], **opts)
    _layers.qk_norm_rope = torch.compile(_EAGER["qk_norm_rope"], **opts)
    _layers.silu_mul = torch.compile(_EAGER["silu_mul"], **opts)


def bind_kernels() -> None:
    global sample
    from ..kernels import decode_attention, rope_kv
    from ..kernels import linear as kernel_linear
    from ..kernels import sampling as kernel_sampling

    sample = kernel_sampling.sample
    _layers.linear = _linear_op(kernel_linear)
    _layers.qk_norm_rope_write = rope_kv.qk_norm_rope_write
    _layers.decode_attention = decode_attention.decode_attention


def use_eager() -> None:
    """Undo enable(): every operation back to its eager definition."""
    global sample, _enabled
    for name, fn in _EAGER.items():
        setattr(_layers, name, fn)
    sample = _sampling.sample
    _enabled = False


def _linear_op(kernel_linear):
    """The Triton product where its table says it beats cuBLAS for that
    (rows, N, K); cuBLAS with the compiled elementwise helpers elsewhere
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
