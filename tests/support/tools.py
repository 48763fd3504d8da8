"""Where the external binaries the tests drive (helm, promtool, prometheus) are found."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def tools_dir() -> Path:
    """$TTSFLEET_CACHE/tools/bin, where `make tools` (hack/install-tools.sh) installs them."""
    cache = Path(os.environ.get("TTSFLEET_CACHE") or Path.home() / ".cache" / "ttsfleet")
    return cache / "tools" / "bin"


def tool(name: str) -> str:
    """The path of `name`: on PATH first, then in tools_dir(). A missing tool fails the
    test (it never skips): a suite that silently skips its real-binary checks proves nothing."""
    found = shutil.which(name)
    if found:
        return found
    cached = tools_dir() / name
    if cached.exists():
        return str(cached)
    pytest.fail(
        f"{name} not found on PATH or in {tools_dir()}: run `make tools` (hack/install-tools.sh)",
        pytrace=False,
    )
