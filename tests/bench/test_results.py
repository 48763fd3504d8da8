"""bench/results holds the published figures and only the runs they are derived from:
summary.json rebuilds from the committed files, and the doc names every file kept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
# The reference runs behind summary.json, in the order docs/benchmarks.md gives them.
REFERENCE_RUNS = [
    ("--ours", "engine-1.7B-rerun.json"),
    ("--ours", "engine.json"),
    ("--peer", "peer-faster-qwen3-tts.json"),
    ("--profile", "profile_step.json"),
    ("--codec", "codec_scale.json"),
    ("--capacity", "capacity.json"),
    ("--startup", "startup.json"),
]
# Each size's `25Hz` block, added to that summary from the 25 Hz runs.
REFERENCE_RUNS_25HZ = [
    ("--ours", "engine-25hz.json"),
    ("--profile", "profile_step-25hz-dit.json"),
    ("--capacity", "capacity-25hz.json"),
    ("--startup", "startup-25hz.json"),
]


def summarise(runs: list[tuple[str, str]], out: Path, *flags: str) -> None:
    args = [str(part) for flag, name in runs for part in (flag, RESULTS / name)]
    subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", "summarise", *flags, *args]
        + ["--out", str(out)],
        check=True,
        capture_output=True,
    )


def test_the_committed_summary_is_derived_from_the_committed_reference_runs(tmp_path):
    out = tmp_path / "summary.json"
    summarise(REFERENCE_RUNS, out)
    summarise(REFERENCE_RUNS_25HZ, out, "--tokenizer-rate", "25")
    assert out.read_text() == (RESULTS / "summary.json").read_text(), (
        "bench/results/summary.json is not what its reference runs give: rebuild it with "
        "the command in docs/benchmarks.md"
    )


def test_every_file_kept_in_results_is_named_in_the_benchmarks_doc():
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    # The doc names per-size files once, with SIZE for the model size.
    named = [
        re.compile(re.escape(name).replace("SIZE", r"(0\.6B|1\.7B)") + "$")
        for name in re.findall(r"`(?:[\w./-]+/)?([\w.-]+)`", doc)
    ]
    unnamed = [
        path.name
        for path in sorted(RESULTS.iterdir())
        if path.name != "README.md" and not any(p.match(path.name) for p in named)
    ]
    assert unnamed == [], "a results file no figure in docs/benchmarks.md is derived from"
