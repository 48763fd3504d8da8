"""`ttsfleet-runtime fetch` fills a model cache volume: the real `huggingface_hub` client
over real HTTP, against a stand-in for the hub (support/fake_hub.py: no internet here).
It downloads, verifies every file against the hub's sizes and hashes, makes the pods'
compile cache directory, writes the marker last, does nothing the second time, and exits
with the codes the operator's fill Job fails at once on (ttsfleet_runtime.model_cache)."""

from __future__ import annotations

import hashlib
import os

import pytest

from support.fake_hub import FakeHub, FakeRepo
from ttsfleet_runtime.checkpoint.fetch import FetchError, HuggingFaceHub, fill
from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    COMPILE_CACHE_DIR,
    FAILURE_BY_CODE,
    MARKER_FILE,
    read_marker,
)

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
TOKEN = "hf_s3cretTokenValue0123456789"
FILES = {
    "config.json": b'{"tts_model_size": "0b6"}',
    "model.safetensors": bytes(range(256)) * 8,
    "speech_tokenizer/model.safetensors": bytes(reversed(range(256))) * 4,
}


def hub_with(**repo) -> FakeHub:
    return FakeHub({REPO: FakeRepo(files=dict(FILES), **repo)})


def test_a_fill_downloads_verifies_and_writes_the_marker_last(tmp_path):
    with hub_with() as hub:
        marker = fill(tmp_path, REPO, "main", HuggingFaceHub(endpoint=hub.endpoint))
    for path, data in FILES.items():
        assert (tmp_path / CHECKPOINT_DIR / path).read_bytes() == data
    assert read_marker(tmp_path) == marker
    assert (marker.repo, marker.revision, marker.commit) == (REPO, "main", FakeRepo.commit)
    # What the marker vouches for: every file's size and hash, as the hub lists them.
    assert {path: (f.size, f.sha256) for path, f in marker.files.items()} == {
        path: (len(data), hashlib.sha256(data).hexdigest()) for path, data in FILES.items()
    }
    # The pods' writable part, made by the fill's user (theirs), empty.
    compile_cache = tmp_path / COMPILE_CACHE_DIR
    assert compile_cache.is_dir() and not any(compile_cache.iterdir())
    assert compile_cache.stat().st_uid == os.getuid()


def test_a_filled_volume_is_left_as_it_is(tmp_path):
    with hub_with() as hub:
        fill(tmp_path, REPO, "main", HuggingFaceHub(endpoint=hub.endpoint))
        hub.requests.clear()
        fill(tmp_path, REPO, FakeRepo.commit, HuggingFaceHub(endpoint=hub.endpoint))
        assert [r for r in hub.requests if "/resolve/" in r] == []


def test_a_file_that_differs_from_the_hubs_hash_fails_verification_and_leaves_no_marker(tmp_path):
    same_size_other_bytes = bytes(len(FILES["model.safetensors"]))
    with (
        hub_with(corrupt={"model.safetensors": same_size_other_bytes}) as hub,
        pytest.raises(FetchError) as error,
    ):
        fill(tmp_path, REPO, "main", HuggingFaceHub(endpoint=hub.endpoint))
    assert error.value.exit_code == 5
    assert "model.safetensors: sha256 differs" in str(error.value)
    assert not (tmp_path / MARKER_FILE).exists()


@pytest.mark.parametrize(
    ("repo", "revision", "token", "exit_code"),
    [
        (REPO, "no-such-revision", TOKEN, 4),
        ("Qwen/no-such-model", "main", TOKEN, 4),
        (REPO, "main", None, 3),  # gated: needs a token
        (REPO, "main", "hf_wrong", 3),
    ],
)
def test_what_a_retry_cannot_fix_exits_with_its_own_code(
    tmp_path, repo, revision, token, exit_code
):
    with hub_with(token=TOKEN) as hub, pytest.raises(FetchError) as error:
        fill(tmp_path, repo, revision, HuggingFaceHub(token, endpoint=hub.endpoint))
    assert error.value.exit_code == exit_code
    assert str(error.value).startswith(FAILURE_BY_CODE[exit_code].reason)
    assert not (tmp_path / MARKER_FILE).exists()


def test_the_command_fills_with_the_token_from_the_environment(tmp_path, fetch_command):
    with hub_with(token=TOKEN) as hub:
        done = fetch_command(tmp_path / "cache", hub.endpoint, REPO, token=TOKEN)
    assert done.returncode == 0, done.stderr
    assert read_marker(tmp_path / "cache").repo == REPO
    assert TOKEN not in done.stdout + done.stderr


def test_the_command_exits_4_for_a_missing_revision_and_says_so(tmp_path, fetch_command):
    with hub_with() as hub:
        done = fetch_command(tmp_path / "cache", hub.endpoint, REPO, "--revision", "v9")
    assert done.returncode == 4
    assert "RevisionNotFound" in done.stderr and "'v9'" in done.stderr


@pytest.mark.parametrize("text", ["", "{", '{"repo": "a"}', '["a"]', '{"repo": 1, "files": 2}'])
def test_a_half_written_or_foreign_marker_reads_as_not_filled(tmp_path, text):
    (tmp_path / MARKER_FILE).write_text(text)
    assert read_marker(tmp_path) is None
