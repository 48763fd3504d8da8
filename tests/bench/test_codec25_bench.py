"""bench/codec25.py end to end on the CPU with the tiny 25 Hz decoder config: every
section the lead's GPU run writes, with timings and no errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.decoder25 import TINY_SPEECH_TOKENIZER

ROOT = Path(__file__).resolve().parents[2]


def test_every_section_is_timed_per_batch_size(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_SPEECH_TOKENIZER))
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "codec25.py"), "--out", str(tmp_path)]
        + ["--config", str(config), "--device", "cpu", "--batches", "1", "2", "--iters", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sections = json.loads((tmp_path / "codec25.json").read_text())["sections"]
    assert set(sections) == {f"{s}_b{b}" for s in ("dit", "vocoder", "step") for b in (1, 2)}
    for key, section in sections.items():
        assert "error" not in section, (key, section.get("traceback"))
    assert len(sections["dit_b2"]["eager"]["samples_ms"]) == 2
    assert sections["vocoder_b1"]["median_ms"] > 0
    assert sections["step_b2"]["audio_s_per_s"] > 0
    assert "section" in result.stdout and "step_b2" in result.stdout
