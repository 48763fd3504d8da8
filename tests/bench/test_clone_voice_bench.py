"""bench/clone_voice.py end to end on the CPU (tiny random Base and CustomVoice
checkpoints): every section the lead's H100 run writes, with what it must hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cloning_and_speaking_a_clone_are_timed_beside_a_built_in_speaker(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "clone_voice.py"), "--out", str(tmp_path)]
        + ["--size", "tiny", "--device", "cpu", "--dtype", "float32", "--lengths", "3"]
        + ["--warmup", "0", "--iters", "2", "--ttfa-runs", "2"]
        + ["--ckpt-dir", str(tmp_path / "checkpoints")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "clone_voice.json").read_text())
    sections = out["sections"]
    assert set(sections) == {"icl_3s", "xvector_3s", "icl_44k1_3s", "parts_3s", "ttfa"}
    for key in ("icl_3s", "xvector_3s", "icl_44k1_3s"):
        assert "error" not in sections[key], sections[key].get("traceback")
        assert len(sections[key]["samples_ms"]) == 2 and sections[key]["median_ms"] > 0
    # 3 s of 24 kHz audio is 37.5 frames of 1920 samples; the encoder keeps whole ones.
    assert sections["icl_3s"]["ref_frames"] == sections["icl_44k1_3s"]["ref_frames"] == 38
    assert sections["xvector_3s"]["ref_frames"] is None
    assert set(sections["parts_3s"]) == {"resample_44k1_to_24k", "speaker_encoder", "codec_encoder"}

    ttfa = sections["ttfa"]
    assert set(ttfa) == {"xvector_3s", "icl_3s", "built_in_ryan"}
    for key, voice in ttfa.items():
        assert "error" not in voice, voice.get("traceback")
        assert len(voice["samples_ms"]) == 2 and voice["ttfa_ms_median"] > 0, key
    # The embedding stands where the speaker's token would; in context adds the frames.
    built_in = ttfa["built_in_ryan"]["prompt_positions"]
    assert ttfa["xvector_3s"]["prompt_positions"] == built_in
    assert ttfa["icl_3s"]["prompt_positions"] == built_in + 38
    assert "TTFA, batch 1" in result.stdout
