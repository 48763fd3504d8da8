"""Fused versions of the small hot functions, by torch.compile.

A decode step runs thousands of tiny kernels (norms, RoPE, residual adds,
sampling), and inside a CUDA graph their count, not their launch, sets the
time. `enable()` swaps each function below for a compiled one (Triton kernels
fusing its elementwise work; dynamic shapes, so one compile serves every batch
bucket). Eager CPU runs keep the plain functions: same math, same results
within float tolerance.
"""

from __future__ import annotations

import logging

from ..model import layers as _layers
from . import sampling as _sampling

log = logging.getLogger(__name__)

# Call sites use these names; enable() rebinds them.
sample = _sampling.sample
sample_first_code = _sampling.sample_first_code
_enabled = False


def enable() -> None:
    global sample, sample_first_code, _enabled
    if _enabled:
        return
    import torch._dynamo

    # A function that fails to compile runs eagerly instead of failing the engine.
    torch._dynamo.config.suppress_errors = True
    # Sizes 1 (batch 1, one query position) are specialised by dynamo: each
    # function sees a handful of shape families (talker/predictor, prefill/decode).
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    opts = dict(dynamic=True, fullgraph=False)
    sample = torch.compile(_sampling.sample, **opts)
    sample_first_code = torch.compile(_sampling.sample_first_code, **opts)
    _layers.rms_norm = torch.compile(_layers.rms_norm_eager, **opts)
    _layers.qk_norm_rope = torch.compile(_layers.qk_norm_rope_eager, **opts)
    _layers.silu_mul = torch.compile(_layers.silu_mul_eager, **opts)
    _enabled = True
    log.info("compiled kernels enabled")
