"""Compiled kernels kept across restarts: `--compile-cache-dir` points Triton's cache
into a directory named by the versions and the device, a second process finds what the
first stored, and a directory it cannot write still lends its kernels (a copy) instead
of stopping the start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import triton

from ttsfleet_runtime.engine import compile_cache
from ttsfleet_runtime.engine.compile_cache import cache_key, use_compile_cache

CACHE_VARIABLES = ("TRITON_CACHE_DIR",)


@pytest.fixture
def clean_environment():
    """The variables unset for the test, and put back as they were after it."""
    saved = {name: os.environ.pop(name, None) for name in CACHE_VARIABLES}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_unset_leaves_the_caches_where_torch_puts_them(clean_environment):
    assert use_compile_cache(None, "cpu") is None
    assert not any(name in os.environ for name in CACHE_VARIABLES)


def test_the_caches_live_under_a_directory_named_by_versions_and_device(
    clean_environment, tmp_path
):
    used = use_compile_cache(tmp_path, "cpu")

    assert used == tmp_path / cache_key("cpu") and used.is_dir()
    for part in (torch.__version__, triton.__version__, str(torch.version.cuda), "cpu"):
        assert part in used.name
    assert os.environ["TRITON_CACHE_DIR"] == str(used / "triton")


def test_a_directory_that_cannot_be_written_lends_a_copy(
    clean_environment, tmp_path, monkeypatch, caplog
):
    # Tests run as root, who may write anywhere: "not writable" is simulated for the
    # volume only (a read-only volume cannot be mounted here).
    volume = tmp_path / "volume"
    kept = volume / cache_key("cpu") / "triton" / "kernel.cubin"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"compiled")
    monkeypatch.setattr(compile_cache, "_writable", lambda d: not d.is_relative_to(volume))
    monkeypatch.setattr(compile_cache.tempfile, "gettempdir", lambda: str(tmp_path / "local"))

    with caplog.at_level("WARNING", logger=compile_cache.__name__):
        used = use_compile_cache(volume, "cpu")

    assert not used.is_relative_to(volume)
    assert (used / "triton" / "kernel.cubin").read_bytes() == b"compiled"
    assert os.environ["TRITON_CACHE_DIR"] == str(used / "triton")
    assert any("not writable" in r.message for r in caplog.records)


def test_a_file_where_the_directory_should_be_falls_back_to_an_empty_local_one(
    clean_environment, tmp_path, monkeypatch
):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setattr(compile_cache.tempfile, "gettempdir", lambda: str(tmp_path / "local"))

    used = use_compile_cache(blocker, "cpu")

    assert used.is_dir() and not any(used.iterdir())
    assert os.environ["TRITON_CACHE_DIR"] == str(used / "triton")


# Triton compiles nothing on a machine without a GPU (its interpreter runs kernels as
# Python), so the processes store and look up an entry through Triton's own cache
# manager: the one a compiled kernel goes through, keyed the same way.
STORE_OR_FIND = """
import sys
from pathlib import Path
from triton.runtime.cache import get_cache_manager
from ttsfleet_runtime.engine.compile_cache import use_compile_cache

use_compile_cache(Path(sys.argv[1]), "cpu")
cache = get_cache_manager("ab" * 32)
if sys.argv[2] == "store":
    cache.put(b"compiled", "kernel.cubin")
print(cache.get_file("kernel.cubin") or "missing")
"""


def test_a_second_process_finds_what_the_first_stored(tmp_path):
    def start(action: str) -> str:
        environ = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
        done = subprocess.run(
            [sys.executable, "-c", STORE_OR_FIND, str(tmp_path), action],
            capture_output=True,
            text=True,
            env=environ,
            timeout=120,
            check=True,
        )
        return done.stdout.strip().splitlines()[-1]

    stored = start("store")
    found = start("find")

    assert stored == found != "missing"
    assert found.startswith(str(tmp_path / cache_key("cpu") / "triton"))
