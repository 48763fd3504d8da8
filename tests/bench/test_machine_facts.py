"""Every benchmark result records the machine it was taken on through one function,
bench.common.machine_facts: the same keys whatever script wrote it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ttsfleet_runtime.bench.common import machine_facts

ROOT = Path(__file__).resolve().parents[2]


def test_the_facts_name_the_machine_the_versions_and_the_commit():
    facts = machine_facts("cpu", ROOT)
    for key in ("host", "cpus", "python", "torch", "cuda", "triton", "date", "command"):
        assert key in facts, key
    assert facts["gpu"] is None  # not asked to look at a GPU
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert facts["git"]["commit"] == head


def test_a_copy_of_the_tree_that_is_no_checkout_says_why_it_has_no_commit(tmp_path):
    git = machine_facts("cpu", tmp_path)["git"]
    assert git["commit"] is None and git["why"]
