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

The small copies the engine makes on every prefill and step (positions, sampling
parameters, text ids, block table rows) go through a ring of pinned buffers each
thread owns (`PinnedStaging`): a fresh pinned tensor per copy (`pin_memory()`)
cost the engine thread 15% of its time at 100 req/s on the H100, the caching
host allocator querying the events of every block in flight and allocating new
pinned pages (cudaHostAlloc) while earlier copies still queued behind the step.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch


class PinnedStaging:
    """A ring of `slots` pinned host buffers of `slot_bytes` each for host -> device
    copies: a copy takes the next buffer, waits for the copy that read it a lap
    earlier, fills it and enqueues the transfer on the current stream, then records
    an event there. Copies larger than a buffer are not taken (None).

    The wait must be for a copy long done, or the thread stalls: the engine thread
    makes its copies while a decode step runs (engine_core.py), and they queue behind
    it. A packed prefill of 64 prompts makes about four copies a prompt (text ids,
    prompt rows, block ids), so a lap is 512 copies: 8 MiB pinned per thread.

    Each buffer's typed view is made once and kept, and numpy arrays (`copy_array`)
    are written through a numpy view of the same memory: a copy was ten torch calls
    (slice, two views, two copies, sizes...), each handing the interpreter lock over,
    and made 3.8% of all the GIL-held samples of the H100 server at 120 req/s; now a
    tensor's copy is four (a slice, its fill, the transfer, the event) and an
    array's three."""

    def __init__(self, slots: int = 512, slot_bytes: int = 16384, *, pin: bool = True, event=None):
        self.slots, self.slot_bytes = slots, slot_bytes
        self._buffer = torch.empty(slots * slot_bytes, dtype=torch.uint8, pin_memory=pin)
        self._bytes = self._buffer.numpy().reshape(slots, slot_bytes)  # the same memory
        self._views: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        make_event = event if event is not None else torch.cuda.Event
        self._events = [make_event() for _ in range(slots)]
        self._recorded = [False] * slots
        self._next = 0

    def copy(
        self, host: torch.Tensor, device: torch.device, out: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """`host` on `device`: a new tensor, or written into `out` (host's shape and
        dtype) when given; None when it is larger than a buffer."""
        shape, dtype = host.shape, host.dtype
        n = math.prod(shape)
        if n * dtype.itemsize > self.slot_bytes:
            return None
        if out is None:
            out = torch.empty(shape, dtype=dtype, device=device)
        if n == 0:
            return out
        i = self._take()
        staged = self._staged(i, dtype, n, shape)
        staged.copy_(host)
        return self._send(i, staged, out)

    def copy_array(
        self, array: np.ndarray, device: torch.device, out: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """`copy` of a numpy array (a dtype torch has), filled by numpy."""
        dtype = _TORCH_DTYPES[array.dtype]
        if array.nbytes > self.slot_bytes:
            return None
        if out is None:
            out = torch.empty(array.shape, dtype=dtype, device=device)
        if array.size == 0:
            return out
        i = self._take()
        self._bytes[i, : array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        return self._send(i, self._staged(i, dtype, array.size, array.shape), out)

    def _take(self) -> int:
        """The next buffer, once the transfer that read it a lap ago is done."""
        i = self._next
        self._next = (i + 1) % self.slots
        if self._recorded[i]:
            self._events[i].synchronize()
        return i

    def _staged(self, i: int, dtype: torch.dtype, n: int, shape) -> torch.Tensor:
        """The first `n` elements of buffer `i` as `dtype`, in `shape`."""
        view = self._views.get((i, dtype))
        if view is None:
            start = i * self.slot_bytes
            view = self._buffer[start : start + self.slot_bytes].view(dtype)
            self._views[(i, dtype)] = view
        staged = view[:n]
        return staged if len(shape) == 1 else staged.view(shape)

    def _send(self, i: int, staged: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        out.copy_(staged, non_blocking=True)
        self._events[i].record()
        self._recorded[i] = True
        return out


# numpy dtypes `PinnedStaging.copy_array` takes.
_TORCH_DTYPES = {
    np.dtype(np.bool_): torch.bool,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.float32): torch.float32,
}

_per_thread = threading.local()


def _staging() -> PinnedStaging:
    staging = getattr(_per_thread, "staging", None)
    if staging is None:
        staging = _per_thread.staging = PinnedStaging()
    return staging


def to_device(
    host: torch.Tensor, device: torch.device | str, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`host` (a CPU tensor) on `device`, copied without blocking the caller: a new
    tensor, or written into `out` (a tensor on `device` of host's shape and dtype, such
    as a CUDA graph's input) when given, which saves an allocation and a device copy.

    The data goes through pinned memory (the thread's `PinnedStaging` ring, or for a
    large tensor a pinned copy the caching host allocator keeps alive until the
    transfer is done), so `host` may change right after."""
    device = _device(device)
    if device.type != "cuda":
        return host.to(device) if out is None else out.copy_(host)
    staged = _staging().copy(host, device, out)
    if staged is not None:
        return staged
    pinned = host.pin_memory()
    if out is None:
        return pinned.to(device, non_blocking=True)
    return out.copy_(pinned, non_blocking=True)


def array_to_device(
    array: np.ndarray, device: torch.device | str, out: torch.Tensor | None = None
) -> torch.Tensor:
    """`to_device` of a numpy array: numpy fills the staging buffer, so the copy
    costs the transfer's torch calls and none for the host side. On the CPU the
    result is a copy too: `array` may change right after."""
    device = _device(device)
    if device.type == "cuda":
        staged = _staging().copy_array(array, device, out)
        if staged is not None:
            return staged
    host = torch.from_numpy(np.ascontiguousarray(array))
    if device.type != "cuda" and out is None:
        return host.clone()
    return to_device(host, device, out)


def ids_on(ids, device: torch.device | str, out: torch.Tensor | None = None) -> torch.Tensor:
    """A list of integer ids as an int64 tensor on `device` (or into `out`: see
    `to_device`)."""
    return array_to_device(np.asarray(ids, dtype=np.int64), device, out)


def _device(device: torch.device | str) -> torch.device:
    # Constructing a torch.device is a torch call too; callers mostly hold one.
    return device if isinstance(device, torch.device) else torch.device(device)


class HostCopy:
    """`t` on its way to the host: a copy into pinned memory queued on the current
    stream (the caching host allocator keeps that memory until the copy is done), and
    an event recorded after it. `result()` waits for that event alone (releasing the
    GIL), not for what the stream got after it, so a caller may queue more work first
    (the engine launches a decode step and prepares the next one meanwhile). On the
    CPU it is `t` itself."""

    def __init__(self, t: torch.Tensor):
        self._copied: torch.cuda.Event | None = None
        if t.device.type != "cuda":
            self._host = t
            return
        self._host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        self._host.copy_(t, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record(torch.cuda.current_stream(t.device))

    def result(self) -> torch.Tensor:
        if self._copied is not None:
            self._copied.synchronize()
            self._copied = None
        return self._host


def to_host(t: torch.Tensor) -> torch.Tensor:
    """`t` on the host, waiting only for the current stream's work up to the copy."""
    return HostCopy(t).result()
