"""A fill is atomic: the new revision is downloaded and verified in a fresh folder of the
volume, and only then becomes the checkpoint and gets its marker. A refill that fails
verification, or is killed on the way, leaves the previous fill whole and marked as it
was; the next fill removes what the failed one left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.fake_hub import FakeHub, FakeRepo
from support.polling import wait_for
from ttsfleet_runtime.checkpoint.fetch import FetchError
from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    FILLS_DIR,
    MARKER_FILE,
    check_cache,
    read_marker,
)

OLD = {
    "config.json": b'{"revision": "old"}',
    "model.safetensors": bytes(range(256)) * 8,
}
NEW = {
    "config.json": b'{"revision": "new"}',
    "model.safetensors": bytes(reversed(range(256))) * 8,
}
OLD_COMMIT, NEW_COMMIT = "a" * 40, "b" * 40


def checkpoint_bytes(root: Path) -> dict[str, bytes]:
    return {path: (root / CHECKPOINT_DIR / path).read_bytes() for path in OLD}


def test_a_refill_that_fails_verification_leaves_the_previous_fill_marked_and_whole(
    tmp_path, fill_from
):
    fill_from(tmp_path, OLD, commit=OLD_COMMIT)
    same_size_other_bytes = bytes(len(NEW["model.safetensors"]))
    with pytest.raises(FetchError) as error:
        fill_from(
            tmp_path,
            NEW,
            commit=NEW_COMMIT,
            corrupt={"model.safetensors": same_size_other_bytes},
        )
    assert error.value.exit_code == 5
    assert read_marker(tmp_path).commit == OLD_COMMIT
    assert checkpoint_bytes(tmp_path) == OLD
    assert check_cache(tmp_path).commit == OLD_COMMIT
    # The failed fill's folder is gone: only the previous fill's remains.
    assert os.listdir(tmp_path / FILLS_DIR) == [read_marker(tmp_path).directory]

    # Filling the old revision again finds it intact and downloads nothing.
    marker, downloaded = fill_from(tmp_path, OLD, commit=OLD_COMMIT)
    assert (marker.commit, downloaded) == (OLD_COMMIT, [])
    assert checkpoint_bytes(tmp_path) == OLD


# A fill in its own process, as the Job runs it, that stops once its download is in
# the volume: the test kills it there, as a node lost or an OOM kill would.
KILLED_FILL = """
import sys
from pathlib import Path
from threading import Event
from ttsfleet_runtime.checkpoint.fetch import HuggingFaceHub, fill

class StopsAfterDownloading(HuggingFaceHub):
    def download(self, repo, commit, into):
        super().download(repo, commit, into)
        Path(sys.argv[3]).touch()
        Event().wait()

fill(Path(sys.argv[1]), "Qwen/Qwen3-TTS-12Hz-0.6B-Base", "main",
     StopsAfterDownloading(endpoint=sys.argv[2]))
"""


def test_a_refill_killed_midway_leaves_the_previous_fill_and_the_next_one_tidies_up(
    tmp_path, fill_from
):
    root, downloaded = tmp_path / "volume", tmp_path / "downloaded"
    fill_from(root, OLD, commit=OLD_COMMIT)
    repo = FakeRepo(files=dict(NEW), commit=NEW_COMMIT)
    with FakeHub({"Qwen/Qwen3-TTS-12Hz-0.6B-Base": repo}) as hub:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        environ["HF_HOME"] = str(tmp_path / "hf-home")
        process = subprocess.Popen(
            [sys.executable, "-c", KILLED_FILL, str(root), hub.endpoint, str(downloaded)],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(downloaded.exists, 60, 0.05, "the killed fill to download")
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
    # Downloaded, verified or not, but never switched to: the old fill is what reads.
    assert len(os.listdir(root / FILLS_DIR)) == 2
    assert check_cache(root).commit == OLD_COMMIT
    assert checkpoint_bytes(root) == OLD

    marker, _ = fill_from(root, NEW, commit=NEW_COMMIT)
    assert checkpoint_bytes(root) == NEW
    assert check_cache(root) == marker
    # The killed fill's folder and the previous fill are both gone.
    assert os.listdir(root / FILLS_DIR) == [marker.directory]


def test_a_volume_an_older_fetch_filled_in_place_is_filled_again(tmp_path, fill_from):
    """Its marker vouched for sizes only: it is not trusted, and is replaced."""
    (tmp_path / CHECKPOINT_DIR).mkdir()
    for path, data in OLD.items():
        (tmp_path / CHECKPOINT_DIR / path).write_bytes(data)
    older = {
        "repo": "Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        "revision": "main",
        "commit": OLD_COMMIT,
        "files": {path: len(data) for path, data in OLD.items()},
    }
    (tmp_path / MARKER_FILE).write_text(json.dumps(older))

    marker, downloaded = fill_from(tmp_path, OLD, commit=OLD_COMMIT)
    assert sorted(downloaded) == sorted(OLD)
    assert os.readlink(tmp_path / CHECKPOINT_DIR) == f"{FILLS_DIR}/{marker.directory}"
    assert checkpoint_bytes(tmp_path) == OLD
    assert os.listdir(tmp_path / FILLS_DIR) == [marker.directory]
