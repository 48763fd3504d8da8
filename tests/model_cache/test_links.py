"""Whoever can write the volume cannot redirect the fill's writes, or what the pods read,
with a symbolic link: the fill replaces links it owns (the checkpoint's), never writes
through a link, fails on one planted where it makes its directories (exit 7, a
sentence), and a link inside a filled checkpoint makes the volume read as not filled."""

from __future__ import annotations

import os

import pytest

from support.fake_hub import FakeHub, FakeRepo
from ttsfleet_runtime.checkpoint.fetch import FetchError
from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    COMPILE_CACHE_DIR,
    FAILURE_BY_CODE,
    FILLS_DIR,
    MARKER_FILE,
    CacheError,
    check_cache,
)

FILES = {
    "config.json": b'{"tts_model_size": "0b6"}',
    "model.safetensors": bytes(range(256)) * 8,
}
UNSAFE_VOLUME = next(code for code, f in FAILURE_BY_CODE.items() if f.reason == "UnsafeVolume")


@pytest.fixture
def elsewhere(tmp_path):
    """A directory outside the volume with a file the fill must never touch."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "config.json").write_bytes(b"precious")
    return folder


def untouched(folder) -> bool:
    return os.listdir(folder) == ["config.json"] and (folder / "config.json").read_bytes() == (
        b"precious"
    )


def test_a_checkpoint_link_planted_to_elsewhere_is_replaced_not_written_through(
    tmp_path, fill_from, elsewhere
):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / CHECKPOINT_DIR).symlink_to(elsewhere)
    marker, _ = fill_from(volume, FILES)
    assert untouched(elsewhere)
    assert os.readlink(volume / CHECKPOINT_DIR) == f"{FILLS_DIR}/{marker.directory}"
    assert check_cache(volume) == marker


def test_a_link_planted_at_the_markers_temporary_name_is_not_written_through(
    tmp_path, fill_from, elsewhere
):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / f".{MARKER_FILE}.tmp").symlink_to(elsewhere / "config.json")
    marker, _ = fill_from(volume, FILES)
    assert untouched(elsewhere)
    assert check_cache(volume) == marker


@pytest.mark.parametrize("directory", [FILLS_DIR, COMPILE_CACHE_DIR])
def test_a_link_planted_where_the_fill_makes_a_directory_fails_the_fill(
    tmp_path, fill_from, elsewhere, directory
):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / directory).symlink_to(elsewhere)
    with pytest.raises(FetchError) as error:
        fill_from(volume, FILES)
    assert error.value.exit_code == UNSAFE_VOLUME
    assert f"{volume / directory} is a symbolic link" in str(error.value)
    assert untouched(elsewhere)
    assert not (volume / MARKER_FILE).exists()


def test_the_command_says_so_in_a_sentence_and_exits_with_the_permanent_code(
    tmp_path, elsewhere, fetch_command
):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / COMPILE_CACHE_DIR).symlink_to(elsewhere)
    with FakeHub({"Qwen/Qwen3-TTS-12Hz-0.6B-Base": FakeRepo(files=dict(FILES))}) as hub:
        done = fetch_command(volume, hub.endpoint, "Qwen/Qwen3-TTS-12Hz-0.6B-Base")
    assert done.returncode == UNSAFE_VOLUME
    assert "Traceback" not in done.stderr
    assert f"fetch failed: UnsafeVolume: {volume / COMPILE_CACHE_DIR} is a symbolic link" in (
        done.stderr
    )


@pytest.mark.parametrize("path", ["config.json", "model.safetensors"])
def test_a_file_of_a_filled_checkpoint_replaced_by_a_link_is_refused_and_filled_again(
    tmp_path, fill_from, path
):
    """Even a link to a copy of the very bytes: what the pods read must be the fill's."""
    volume, copy = tmp_path / "volume", tmp_path / "copy"
    marker, _ = fill_from(volume, FILES)
    copy.write_bytes(FILES[path])
    linked = volume / FILLS_DIR / marker.directory / path
    linked.unlink()
    linked.symlink_to(copy)
    with pytest.raises(CacheError, match=f"{CHECKPOINT_DIR}/{path} is a symbolic link"):
        check_cache(volume)

    marker, downloaded = fill_from(volume, FILES)
    assert sorted(downloaded) == sorted(FILES)
    assert not (volume / CHECKPOINT_DIR / path).is_symlink()
    assert copy.read_bytes() == FILES[path]
    assert check_cache(volume) == marker


def test_a_checkpoint_link_pointing_elsewhere_than_the_markers_folder_is_refused(
    tmp_path, fill_from, elsewhere
):
    volume = tmp_path / "volume"
    fill_from(volume, FILES)
    (volume / CHECKPOINT_DIR).unlink()
    (volume / CHECKPOINT_DIR).symlink_to(elsewhere)
    with pytest.raises(CacheError, match=f"{CHECKPOINT_DIR} is not the link to {FILLS_DIR}/"):
        check_cache(volume)


def test_removing_what_earlier_fills_left_follows_no_link(tmp_path, fill_from, elsewhere):
    """The fill deletes leftovers under fills/: links there, or inside a leftover folder,
    are removed themselves, never what they point at."""
    volume = tmp_path / "volume"
    (volume / FILLS_DIR / "leftover").mkdir(parents=True)
    (volume / FILLS_DIR / "leftover" / "inside").symlink_to(elsewhere)
    (volume / FILLS_DIR / "planted").symlink_to(elsewhere)
    marker, _ = fill_from(volume, FILES)
    assert untouched(elsewhere)
    assert os.listdir(volume / FILLS_DIR) == [marker.directory]
