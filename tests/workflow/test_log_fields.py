"""Structured log fields never collide with LogRecord's own attributes.

`log.info(msg, extra={"thread": ...})` raises KeyError inside logging ("Attempt to
overwrite 'thread' in LogRecord"), and only when that level is enabled: a debug line on
the engine thread once ended the engine and codec threads of a server started with
TTSFLEET_LOG_LEVEL=debug. Every `extra={...}` written as a literal is checked here."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What makeRecord refuses: the attributes of a fresh LogRecord, plus the two it names.
RESERVED = set(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {
    "message",
    "asctime",
}


def extra_keys(path: Path):
    """(line, key) of every string key of an `extra={...}` literal in `path`."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                for key in keyword.value.keys:
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        yield node.lineno, key.value


def test_no_log_field_overwrites_a_log_record_attribute():
    files = [p for folder in ("runtime", "operator") for p in (ROOT / folder).rglob("*.py")]
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {key!r}"
        for path in files
        for line, key in extra_keys(path)
        if key in RESERVED
    ]
    assert offenders == []


def test_the_check_sees_a_reserved_field():
    """The scan itself finds `extra={"thread": ...}` (so an empty result above means
    something)."""
    assert "thread" in RESERVED and "process" in RESERVED
    source = ROOT / "runtime/ttsfleet_runtime/engine/background_capture.py"
    keys = {key for _, key in extra_keys(source)}
    assert "worker" in keys  # the background capture's field, scanned like any other
