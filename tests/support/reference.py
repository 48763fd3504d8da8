"""The official qwen-tts 0.1.1 package, which the parity tests compare our modules with.

`make venv` installs it (with --no-deps: only its model files are used), so its absence
is a broken test environment: the parity tests fail saying so, rather than skip and let
a run pass without comparing anything.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest

MISSING = "the qwen-tts reference is missing ({}): run `make venv` (pip install --no-deps qwen-tts==0.1.1)"


def require(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        pytest.fail(MISSING.format(error))


def reference_origin() -> str:
    """Where the installed `qwen_tts` package lives (its __init__ is never imported)."""
    spec = importlib.util.find_spec("qwen_tts")
    if spec is None or spec.origin is None:
        pytest.fail(MISSING.format("no module named qwen_tts"))
    return spec.origin
