"""`ttsfleet-runtime bench` on the CPU with a tiny 25 Hz checkpoint: the same command the
H100 runs for the 12 Hz vs 25 Hz comparison writes its random checkpoint at the asked
rate and reports audio seconds at that rate (25 codes, 960 samples each, a second)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(300)
def test_the_engine_bench_runs_a_25hz_checkpoint(tmp_path):
    frames = 36
    done = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "bench", "--sizes", "tiny"]
        + ["--device", "cpu", "--dtype", "float32", "--tokenizer-rate", "25"]
        + ["--frames", str(frames), "--batches", "1,2", "--repeats", "1", "--no-graphs"]
        + ["--ckpt-dir", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    written = tmp_path / "ckpt" / "Qwen3-TTS-25Hz-tiny-CustomVoice-random"
    config = json.loads((written / "config.json").read_text())
    assert config["tokenizer_type"] == "qwen3_tts_tokenizer_25hz"
    tiny = json.loads((tmp_path / "out" / "ours.json").read_text())["tiny"]
    single = tiny["single"][0]
    assert single["frames"] == frames and single["audio_s"] == pytest.approx(frames / 25)
    assert [b["batch"] for b in tiny["batch"]] == [1, 2]
    assert all(b["audio_s_per_s"] > 0 for b in tiny["batch"])


def test_12hz_stays_the_default_folder():
    """Benchmarks that never name a rate keep their 12 Hz checkpoints where they were."""
    from argparse import Namespace

    from ttsfleet_runtime.bench.common import checkpoint_path

    path = checkpoint_path("1.7B", Namespace(model=None, ckpt_dir="/ckpt"))
    assert Path(path).name == "Qwen3-TTS-12Hz-1.7B-CustomVoice-random"
