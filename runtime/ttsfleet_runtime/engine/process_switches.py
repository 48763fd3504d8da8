"""The torch and interpreter switches that act on the whole process. A serving process (and a benchmark
that times one) sets them once at start-up, before it builds its engine; no engine's
constructor touches them, so building an engine changes no other model in the process.

They are process-wide because torch offers nothing narrower: `enable_cudnn_sdp` is a
global flag, and `torch.nn.attention.sdpa_kernel`, the scoped form, sets the same global
flags for as long as its block runs, on every thread (the engine and codec threads run
attention at the same time), so it cannot choose per call either.
"""

from __future__ import annotations

import sys

import torch

# How long a thread that wants the interpreter lock waits before the holder is asked
# to hand it over (CPython's default: 5 ms). The engine thread hands the lock over at
# most torch calls of an iteration (bench/torch_calls.py), and takes it back only
# when the thread holding it then lets go: with the event loop busy (many streams, a
# batch job's storage calls), each of those handovers could cost the engine up to
# 5 ms, and an iteration makes dozens (the batch benchmark's H200 run: the engine's
# iteration took twice as long with a batch running, its step mostly waiting).
GIL_SWITCH_INTERVAL_S = 0.0005


def set_for_serving(device: str) -> None:
    """The switches a server on `device` runs with (on a CPU only the interpreter's)."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    if torch.device(device).type != "cuda":
        return
    # cuDNN's fused attention builds a kernel for every new shape (~0.1 s), and every
    # graph capture brings new shapes: a request that arrived during the captures after
    # ready waited for them. The other SDPA kernels take the same masks with no
    # per-shape build.
    torch.backends.cuda.enable_cudnn_sdp(False)
