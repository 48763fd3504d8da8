"""`make test` (what CI runs) lints first: formatting, lint rules and the import-layer
contracts, before any test starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_test_runs_the_linters_before_the_tests(tmp_path):
    # -n prints the recipes without running them (the cache path keeps the real venv untouched).
    plan = subprocess.run(
        ["make", "-n", "--no-print-directory", "test", f"TTSFLEET_CACHE={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    position = {
        step: next(i for i, line in enumerate(plan) if step in line)
        for step in (
            "ruff format --check",
            "ruff check",
            "lint-imports",
            "pytest tests",
            "pytest e2e",
        )
    }
    assert position["ruff format --check"] < position["pytest tests"] < position["pytest e2e"]
    assert position["ruff check"] < position["pytest tests"]
    assert position["lint-imports"] < position["pytest tests"]
