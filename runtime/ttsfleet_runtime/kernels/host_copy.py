"""Copies between host and GPU that wait only for what they need.

A copy from or to pageable host memory goes through the CUDA driver's staging
buffer, which every thread of the process shares: it waits behind any other
pageable copy in flight. In the server the codec thread's copy of a decoded
batch back to the host waits for that whole codec call (milliseconds at a
large batch), so every small pageable copy of the engine thread (a prompt's
ids, a block table row, the step's codes) waited for the codec too: the H100
profile under 60 req/s showed the engine thread blocked in copies for 70% of
its time and the codec and decode streams never running at once. Copies
through pinned memory are asynchronous DMA with no shared staging: a host ->
device copy returns at once, and a device -> host copy waits only for the
current stream's work.
"""

from __future__ import annotations

import torch


def to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`host` (a CPU tensor) on `device`, copied without blocking the caller.

    The data goes through a pinned copy (PyTorch's caching host allocator keeps
    it alive until the transfer is done), so `host` may change right after."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def ids_on(ids, device: torch.device | str) -> torch.Tensor:
    """A list of integer ids as an int64 tensor on `device` (see `to_device`)."""
    return to_device(torch.tensor(list(ids), dtype=torch.long), device)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """`t` on the host, waiting only for the current stream's work on its device."""
    if t.device.type != "cuda":
        return t
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    torch.cuda.current_stream(t.device).synchronize()
    return out
