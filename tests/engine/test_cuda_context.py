"""CUDA's context made beside the imports: started for a CUDA device only, on the
device the setting names, and never a reason for the start to fail (no driver, a
failing driver call: a log line, and torch makes the context itself later)."""

from __future__ import annotations

import ctypes
import json
import logging
import subprocess
import sys
import textwrap
import threading

import pytest

from ttsfleet_runtime.engine.cuda_context import LIBCUDA, device_ordinal, retain_in_background

LOGGER = "ttsfleet_runtime.engine.cuda_context"


@pytest.mark.parametrize(
    ("device", "ordinal"),
    [("cuda", 0), ("cuda:0", 0), ("cuda:3", 3), ("cpu", None), ("cuda:x", None), ("cuda:-1", None)],
)
def test_the_device_setting_names_the_ordinal_torch_would_use(device, ordinal):
    assert device_ordinal(device) == ordinal


def test_a_cpu_server_starts_no_thread():
    before = threading.enumerate()
    assert retain_in_background("cpu") is None
    assert threading.enumerate() == before


def test_without_the_driver_library_the_thread_says_so_at_debug_and_ends(caplog):
    try:
        ctypes.CDLL(LIBCUDA)
    except OSError:
        pass
    else:
        pytest.skip("this machine has a CUDA driver")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        retain_in_background("cuda").join(timeout=10)
    (line,) = caplog.records
    assert line.levelno == logging.DEBUG and line.device == 0
    assert line.message.startswith("CUDA context not made early: OSError")


class StandInDriver:
    """libcuda's calls as ctypes makes them (no driver exists on a CPU test machine):
    each returns the CUresult it is given, and records the device it was asked for."""

    def __init__(self, device_get: int = 0):
        self.device_get = device_get
        self.asked_for = None

    def cuInit(self, flags):
        return 0

    def cuDeviceGet(self, device, ordinal):
        self.asked_for = ordinal
        return self.device_get

    def cuDevicePrimaryCtxRetain(self, context, device):
        return 0

    def cuGetErrorName(self, result, name):
        names = {100: b"CUDA_ERROR_NO_DEVICE"}
        if result not in names:
            return 1  # CUDA_ERROR_INVALID_VALUE: no such CUresult
        name._obj.value = names[result]
        return 0


def test_the_context_of_the_named_device_is_retained_and_the_time_logged(caplog):
    driver = StandInDriver()
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        retain_in_background("cuda:2", driver).join(timeout=10)
    assert driver.asked_for == 2
    (line,) = caplog.records
    assert line.message == "CUDA context made beside the imports"
    assert line.device == 2 and line.seconds >= 0


@pytest.mark.parametrize(("result", "name"), [(100, "CUDA_ERROR_NO_DEVICE"), (999, "unknown")])
def test_a_failing_driver_call_is_a_warning_naming_its_cu_result(caplog, result, name):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        retain_in_background("cuda", StandInDriver(device_get=result)).join(timeout=10)
    (line,) = caplog.records
    assert line.levelno == logging.WARNING
    assert (line.call, line.cu_result, line.cu_result_name) == ("cuDeviceGet", result, name)
    assert f"cuDeviceGet returned {result} ({name})" in line.message


def test_serve_starts_it_first_before_the_server_or_torch_is_imported():
    """In a process of its own: what `serve` has imported when it starts the thread."""
    probe = textwrap.dedent(
        """
        import json, sys
        from ttsfleet_runtime.engine import cuda_context

        def started(device, driver=None):
            heavy = [m for m in ("fastapi", "torch", "ttsfleet_runtime.server.serve") if m in sys.modules]
            print(json.dumps({"device": device, "imported": heavy}))
            raise SystemExit(0)

        cuda_context.retain_in_background = started
        from ttsfleet_runtime.cli import main
        main(["serve", "--model", "/nowhere", "--auth", "disabled", "--device", "cuda:1"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == {"device": "cuda:1", "imported": []}
