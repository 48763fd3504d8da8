"""bench/profile_step.py end to end on the CPU (tiny model: leaf operators stand in for
kernels, no graphs): the JSON the lead's GPU runs and `bench summarise` read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def profile(tmp_path: Path, checkpoint: Path, *args: str) -> tuple[dict, str]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "profile_step.py"), "--device", "cpu"]
        + ["--sizes", "tiny", "--model", str(checkpoint), "--out", str(tmp_path), "--iters", "1"]
        + list(args),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((tmp_path / "profile_step.json").read_text()), result.stdout


def test_each_step_is_counted_per_step_with_its_top_operators(tmp_path, tiny_custom_voice):
    out, stdout = profile(tmp_path, tiny_custom_voice, "--batches", "1,2", "--codec", "1x1,2x2")
    assert out["env"]["torch"] and out["env"]["triton"] and out["env"]["date"]
    assert "commit" in out["env"]["git"]
    size = out["sizes"]["tiny"]
    steps = ["decode_B1", "decode_B2", "codec_B1_n1", "codec_B2_n2"]
    for key in steps:
        step = size[key]
        assert "error" not in step, step.get("traceback")
        assert step["kernels_per_step"] > 10 and step["gpu_us_per_step"] > 0
        top = step["top"]
        assert 1 <= len(top) <= 25 and len(top) <= step["distinct"]
        times = [k["us_per_step"] for k in top]
        assert times == sorted(times, reverse=True)
        assert sum(times) <= step["gpu_us_per_step"] + 1
        assert all(len(k["name"]) <= 120 and k["calls_per_step"] > 0 for k in top)
        assert "graph_ms" not in step  # no graphs on the CPU
    assert size["decode_B2"]["batch"] == 2 and size["codec_B2_n2"]["frames"] == 2
    assert size["decode_B1"]["kv_len"] == 256 and size["decode_B1"]["kv_view"] == 512
    assert size["summary"]["kernels_per_step_b1"] == size["decode_B1"]["kernels_per_step"]
    table = stdout.strip().splitlines()[-5:]
    assert table[0].split()[:3] == ["size", "step", "kernels"]
    assert [line.split()[1] for line in table[1:]] == steps


def test_a_failing_section_is_recorded_and_the_others_still_run(tmp_path, tiny_custom_voice):
    out, _ = profile(
        tmp_path, tiny_custom_voice, "--batches", "1", "--codec", "1x1", "--kv-len", "600"
    )
    size = out["sizes"]["tiny"]
    assert "--kv-len 600" in size["decode_B1"]["error"]
    assert size["codec_B1_n1"]["kernels_per_step"] > 0
    assert size["summary"]["kernels_per_step_b1"] is None


def test_the_25hz_decoder_is_profiled_in_steady_state_with_its_stages(
    tmp_path, tiny_25hz_custom_voice
):
    out, stdout = profile(
        tmp_path,
        tiny_25hz_custom_voice,
        "--tokenizer-rate",
        "25",
        "--batches",
        "1",
        "--codec",
        "2x12",
    )
    call = out["sizes"]["tiny"]["codec25_B2_n12"]
    assert "error" not in call, call.get("traceback")
    assert call["batch"] == 2 and call["codes_per_stream"] == 12
    # One block of 12 codes a stream: 0.48 s of audio each, at 25 codes a second.
    assert call["audio_s_per_call"] == 0.96
    assert call["kernels_per_step"] > 10 and call["audio_s_per_s"] > 0
    assert call["dit_windows_eager_ms"] > 0 and call["vocoder_eager_ms"] > 0
    assert call["dit_graphed"] is False  # no graphs on the CPU
    assert "codec25_B2_n12" in stdout and "audio-s/s" in stdout


def test_fp8_weights_are_profiled_as_a_server_runs_them(tmp_path, tiny_custom_voice):
    out, _ = profile(
        tmp_path, tiny_custom_voice, "--weights", "fp8", "--batches", "1", "--codec", ""
    )
    assert out["config"]["weights"] == "fp8"
    step = out["sizes"]["tiny"]["decode_B1"]
    assert "error" not in step, step.get("traceback")
    # float32 on the CPU: the quantized matrices take a byte an element, not four.
    from ttsfleet_runtime.model.weights import load_model

    unquantized = load_model(tiny_custom_voice, "cpu", "float32", max_positions=64).weight_bytes()
    weights = out["sizes"]["tiny"]["weight_bytes"]
    assert 0 < weights["decoder_matrices"] < unquantized["decoder_matrices"] / 3
    assert weights["other"] == unquantized["other"]
    assert step["kernels_per_step"] > 10
