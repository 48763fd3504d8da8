"""Compiled kernels kept across restarts: Triton's cache in one directory of the
operator's choosing (`--compile-cache-dir`, a volume).

A cold start compiles the Triton kernels of every batch bucket and shape for
tens of seconds; with the cache on a volume the next pod only loads them. What
one build compiled is useless to another, so the cache lives in a
subdirectory named by everything a compiled artefact depends on outside our
source (which Triton hashes itself): torch, Triton and CUDA versions, this
runtime's version and the GPU model.

`use_compile_cache` must run before the first Triton kernel compiles: Triton
reads the variable it sets when it compiles. A directory that cannot be written
(a read-only volume) is copied to a local temporary one, so its kernels are
still used, and a warning says so; none at all falls back to torch's default
places.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import torch

log = logging.getLogger(__name__)


def cache_key(device: str) -> str:
    """The subdirectory name for this build on `device`: versions and GPU model."""
    try:
        runtime = metadata.version("ttsfleet")
    except metadata.PackageNotFoundError:
        runtime = "unknown"
    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = "none"
    on = torch.device(device)
    if on.type == "cuda":
        index = on.index if on.index is not None else torch.cuda.current_device()
        gpu = torch.cuda.get_device_name(index)
    else:
        gpu = on.type
    parts = (
        f"torch-{torch.__version__}",
        f"triton-{triton}",
        f"cuda-{torch.version.cuda or 'none'}",
        f"ttsfleet-{runtime}",
        gpu,
    )
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", "_".join(parts))


def use_compile_cache(root: Path | None, device: str) -> Path | None:
    """Point Triton's cache into `root`/<cache_key> (made if missing). -> the
    directory used, or None (`root` unset: Triton's default)."""
    if root is None:
        return None
    key = cache_key(device)
    wanted = Path(root) / key
    directory = wanted if _writable(wanted) else _local_copy(wanted, key)
    os.environ["TRITON_CACHE_DIR"] = str(directory / "triton")
    log.info(
        "compile cache",
        extra={"compile_cache_dir": str(directory), "reused": _has_entries(directory)},
    )
    return directory


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-")  # noqa: SIM115
        probe.close()
    except OSError:
        return False
    return True


def _local_copy(wanted: Path, key: str) -> Path:
    """A writable local directory holding what `wanted` holds (if anything)."""
    local = Path(tempfile.gettempdir()) / "ttsfleet-compile-cache" / key
    copied = False
    if wanted.is_dir() and not local.exists():
        try:
            shutil.copytree(wanted, local)
            copied = True
        except OSError as exc:
            log.warning(f"could not copy the compile cache {wanted}: {exc}")
    local.mkdir(parents=True, exist_ok=True)
    log.warning(
        f"the compile cache {wanted} is not writable: using {local} "
        f"({'a copy of it' if copied else 'empty'}); kernels compiled now are lost at exit",
        extra={"compile_cache_dir": str(wanted), "fallback": str(local)},
    )
    return local


def _has_entries(directory: Path) -> bool:
    return any(directory.rglob("*")) if directory.is_dir() else False
