"""One command per job: the runtime's CLI owns the benchmarks (`ttsfleet-runtime bench`,
the engine's with its parity check by default); no script in bench/ is a second way to
run one."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_benchmark_runs_from_the_runtime_cli_with_its_parity_check():
    result = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert "--parity" in result.stdout and "--sizes" in result.stdout


def test_no_bench_script_wraps_a_packaged_benchmark():
    from ttsfleet_runtime.bench import BENCHMARKS

    modules = "|".join(module for module, _ in BENCHMARKS.values())
    wraps = re.compile(
        rf"ttsfleet_runtime\.bench\.({modules}) import .*\brun\b"
        rf"|ttsfleet_runtime\.bench import .*\b({modules})\b"
    )
    wrappers = [p.name for p in (ROOT / "bench").rglob("*.py") if wraps.search(p.read_text())]
    assert wrappers == []


@pytest.mark.parametrize("name", ["engine", "capacity", "startup", "summarise"])
def test_each_benchmark_has_its_command(name):
    result = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", name, "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert result.stdout.startswith(f"usage: ttsfleet-runtime bench {name}")


def test_the_engine_is_the_benchmark_when_none_is_named():
    from ttsfleet_runtime.bench import options
    from ttsfleet_runtime.cli import register

    parser = argparse.ArgumentParser(prog="ttsfleet-runtime")
    register(parser.add_subparsers(dest="command", required=True))
    unnamed = options(parser.parse_args(["bench", "--sizes", "1.7B", "--frames", "120"]))
    named = options(parser.parse_args(["bench", "engine", "--sizes", "1.7B", "--frames", "120"]))
    assert unnamed == named
    name, chosen = unnamed
    assert name == "engine" and chosen.sizes == "1.7B" and chosen.frames == 120
    assert chosen.batches == "1,8,32,64,128"  # the engine's default fills what was not given
    assert not hasattr(chosen, "handler") and not hasattr(chosen, "command")
