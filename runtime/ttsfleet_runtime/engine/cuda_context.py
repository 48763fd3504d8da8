"""CUDA's context, made on a thread while the server imports (issue 14: start-up).

The first CUDA call of a process makes the device's context: ~0.3 s on an H100,
paid inside the engine's first CUDA op after seconds of imports. Torch's runtime
uses the device's *primary* context, so retaining that context from a thread at
the very start of `serve` makes exactly what torch would make, while the main
thread imports torch and the server: ctypes releases the GIL in a driver call,
so the imports go on at their own speed, and torch's first CUDA op then finds the
context made (0.02 s instead of 0.3 s on the H100). The context is retained for
the life of the process: torch retains it too, and it must not be destroyed in
between. The driver applies CUDA_VISIBLE_DEVICES itself, as it does for torch.

This is an optimisation and nothing more: no driver library, a failing call,
anything at all gives a log line, and torch makes the context itself as it always
did. No torch here: this runs before torch is imported.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time

log = logging.getLogger(__name__)

LIBCUDA = "libcuda.so.1"  # the driver's name on Linux, as CUDA's runtime opens it


class DriverError(Exception):
    """A driver call returned a CUresult other than CUDA_SUCCESS (0)."""

    def __init__(self, call: str, result: int, name: str):
        super().__init__(f"{call} returned {result} ({name})")
        self.call, self.result, self.name = call, result, name


def device_ordinal(device: str) -> int | None:
    """The CUDA device `device` names, as torch reads it ("cuda" 0, "cuda:N" N);
    None for any other device, or a name torch would refuse (it says why later)."""
    kind, _, index = device.partition(":")
    if kind != "cuda":
        return None
    if not index:
        return 0
    return int(index) if index.isdigit() else None


def retain_primary_context(ordinal: int, driver=None) -> None:
    """Make (or find) device `ordinal`'s primary context and hold it for good.
    `driver`: the CUDA driver library (default: libcuda, loaded here). Raises
    OSError without one, DriverError when a call fails."""
    cuda = driver if driver is not None else ctypes.CDLL(LIBCUDA)
    device, context = ctypes.c_int(), ctypes.c_void_p()
    _check(cuda, "cuInit", cuda.cuInit(0))
    _check(cuda, "cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), ordinal))
    _check(
        cuda,
        "cuDevicePrimaryCtxRetain",
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
    )


def _check(cuda, call: str, code: int) -> None:
    if code != 0:
        raise DriverError(call, code, _result_name(cuda, code))


def _result_name(cuda, code: int) -> str:
    """The CUresult's name as the driver spells it (CUDA_ERROR_NO_DEVICE, ...)."""
    name = ctypes.c_char_p()
    if cuda.cuGetErrorName(code, ctypes.byref(name)) != 0 or not name.value:
        return "unknown"
    return name.value.decode()


def retain_in_background(device: str, driver=None) -> threading.Thread | None:
    """Start retaining `device`'s primary context on a daemon thread (None, and no
    thread, for a device that is not CUDA). Never raises, nor does the thread."""
    ordinal = device_ordinal(device)
    if ordinal is None:
        return None
    thread = threading.Thread(
        target=_retain_logged, args=(ordinal, driver), name="cuda-context", daemon=True
    )
    thread.start()
    return thread


def _retain_logged(ordinal: int, driver) -> None:
    started = time.monotonic()
    fields = {"device": ordinal}
    try:
        retain_primary_context(ordinal, driver)
    except DriverError as error:
        # Torch's own start will most likely meet the same error and say so.
        log.warning(
            f"CUDA context not made early: {error}; torch makes it when it starts",
            extra={
                **fields,
                "call": error.call,
                "cu_result": error.result,
                "cu_result_name": error.name,
            },
        )
        return
    except Exception as error:  # no driver library (OSError), anything else
        log.debug(
            f"CUDA context not made early: {error!r}; torch makes it when it starts",
            extra=fields,
        )
        return
    log.debug(
        "CUDA context made beside the imports",
        extra={**fields, "seconds": round(time.monotonic() - started, 3)},
    )
