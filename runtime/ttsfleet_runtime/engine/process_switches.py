"""The torch switches that act on the whole process. A serving process (and a benchmark
that times one) sets them once at start-up, before it builds its engine; no engine's
constructor touches them, so building an engine changes no other model in the process.

They are process-wide because torch offers nothing narrower: `enable_cudnn_sdp` is a
global flag, and `torch.nn.attention.sdpa_kernel`, the scoped form, sets the same global
flags for as long as its block runs, on every thread (the engine and codec threads run
attention at the same time), so it cannot choose per call either.
"""

from __future__ import annotations

import torch


def set_for_serving(device: str) -> None:
    """The switches a server on `device` runs with (nothing on a CPU)."""
    if torch.device(device).type != "cuda":
        return
    # cuDNN's fused attention builds a kernel for every new shape (~0.1 s), and every
    # graph capture brings new shapes: a request that arrived during the captures after
    # ready waited for them. The other SDPA kernels take the same masks with no
    # per-shape build.
    torch.backends.cuda.enable_cudnn_sdp(False)
