"""`serve` on a model cache checks it before reading a weight: the files the marker
vouches for (sizes and samples, every byte with --verify-model full) and what the
loaders need (config.json as JSON, the text tokenizer, speech_tokenizer/). A cache that
fails is refused in one sentence naming the file and the fix, exit 2, no traceback.
The fills come from a stand-in hub serving the tiny random checkpoint."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.ports import free_port
from support.runtime import RuntimeProcess
from ttsfleet_runtime.model_cache import CHECKPOINT_DIR, FILLS_DIR


@pytest.fixture(scope="module")
def tiny_files(tiny_custom_voice) -> dict[str, bytes]:
    """The tiny checkpoint's files by relative path, as a hub serves them."""
    return {
        str(path.relative_to(tiny_custom_voice)): path.read_bytes()
        for path in sorted(tiny_custom_voice.rglob("*"))
        if path.is_file()
    }


def serve_until_it_exits(checkpoint, *flags: str) -> subprocess.CompletedProcess:
    """`ttsfleet-runtime serve` as a pod runs it; a refusal ends it before it listens."""
    return subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime", "serve", "--model", str(checkpoint)]
        + ["--device", "cpu", "--auth", "disabled", "--port", str(free_port()), *flags],
        capture_output=True,
        text=True,
        timeout=180,
    )


def assert_refused_in_a_sentence(done, *words: str) -> None:
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (refusal,) = [line for line in done.stderr.splitlines() if all(w in line for w in words)]
    assert "ttsfleet-runtime fetch" in refusal or "whole checkpoint" in refusal


def test_serve_loads_a_filled_cache_through_the_fills_link(tmp_path, fill_from, tiny_files):
    marker, _ = fill_from(tmp_path / "volume", tiny_files)
    checkpoint = tmp_path / "volume" / CHECKPOINT_DIR
    assert checkpoint.readlink().as_posix() == f"{FILLS_DIR}/{marker.directory}"
    server = RuntimeProcess(tmp_path, checkpoint, "--verify-model", "full")
    try:
        server.wait_ready()
    finally:
        server.stop()


def test_serve_refuses_weights_changed_after_the_fill(tmp_path, fill_from, tiny_files):
    fill_from(tmp_path / "volume", tiny_files)
    weights = tmp_path / "volume" / CHECKPOINT_DIR / "model.safetensors"
    with weights.open("r+b") as file:  # the last byte: tensor data, same size
        file.seek(-1, 2)
        last = file.read(1)
        file.seek(-1, 2)
        file.write(bytes([last[0] ^ 0xFF]))
    done = serve_until_it_exits(weights.parent)
    assert_refused_in_a_sentence(
        done, f"{weights} differs from the bytes the fill verified", "ttsfleet-runtime fetch"
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda files: {p: d for p, d in files.items() if not p.startswith("speech_tokenizer/")},
            "speech_tokenizer/config.json is missing",
        ),
        (
            lambda files: {p: d for p, d in files.items() if p != "merges.txt"},
            "merges.txt is missing",
        ),
        (lambda files: {**files, "config.json": b'{"talker_config": '}, "config.json is not JSON"),
        (lambda files: {**files, "config.json": b"[1, 2]"}, "config.json is not a JSON object"),
    ],
    ids=["no-speech-tokenizer", "no-merges", "config-not-json", "config-a-list"],
)
def test_serve_refuses_a_marked_cache_that_cannot_load(
    tmp_path, fill_from, tiny_files, change, named
):
    """The fill verified these files against the hub: the repository itself lacks them."""
    fill_from(tmp_path / "volume", change(tiny_files))
    done = serve_until_it_exits(tmp_path / "volume" / CHECKPOINT_DIR)
    assert_refused_in_a_sentence(done, f"{tmp_path}/volume/{CHECKPOINT_DIR}/{named}")


def test_serve_refuses_a_model_path_that_is_no_directory(tmp_path):
    done = serve_until_it_exits(tmp_path / "nothing-here")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"--model {tmp_path}/nothing-here is not a directory" in done.stderr
