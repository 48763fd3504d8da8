"""The marker vouches for each file's size and hashes, and is checked: by default sizes
and a sample (sha256 of each file's first and last MiB), every byte on demand. A file
changed after the fill makes a refill download again instead of leaving it be."""

from __future__ import annotations

import hashlib
import json

import pytest

from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    MARKER_FILE,
    SAMPLE_BYTES,
    CacheError,
    check_cache,
)

# One file larger than the two samples, so that its middle is read by a full check only.
BIG = bytes(range(251)) * (3 * SAMPLE_BYTES // 251)
FILES = {
    "config.json": b'{"tts_model_size": "0b6"}',
    "model.safetensors": BIG,
    "speech_tokenizer/model.safetensors": bytes(reversed(range(256))) * 4,
}


def overwrite_in_place(path, offset: int) -> None:
    """Flip one byte, keeping the size (what a bad disk or a careless hand does)."""
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0xFF]))


def test_the_marker_records_each_files_size_sha256_and_sample(tmp_path, fill_from):
    marker, _ = fill_from(tmp_path, FILES)
    big = marker.files["model.safetensors"]
    assert (big.size, big.sha256) == (len(BIG), hashlib.sha256(BIG).hexdigest())
    ends = BIG[:SAMPLE_BYTES] + BIG[-SAMPLE_BYTES:]
    assert big.sample_sha256 == hashlib.sha256(ends).hexdigest()
    assert check_cache(tmp_path) == check_cache(tmp_path, full=True) == marker


@pytest.mark.parametrize(
    ("path", "offset"),
    [
        ("model.safetensors", len(BIG) - 10),  # in the last MiB
        ("model.safetensors", 5),  # in the first
        ("speech_tokenizer/model.safetensors", 100),  # a small file: sampled whole
    ],
)
def test_a_file_changed_in_place_is_found_by_the_cheap_check_and_filled_again(
    tmp_path, fill_from, path, offset
):
    fill_from(tmp_path, FILES)
    overwrite_in_place(tmp_path / CHECKPOINT_DIR / path, offset)
    with pytest.raises(CacheError) as error:
        check_cache(tmp_path)
    assert f"{tmp_path}/{CHECKPOINT_DIR}/{path} differs from the bytes the fill verified" in str(
        error.value
    )
    assert "ttsfleet-runtime fetch" in str(error.value)

    _, downloaded = fill_from(tmp_path, FILES)
    assert sorted(downloaded) == sorted(FILES)
    assert (tmp_path / CHECKPOINT_DIR / path).read_bytes() == FILES[path]


def test_a_change_in_the_middle_of_a_large_file_needs_the_full_check(tmp_path, fill_from):
    """What the cheap check misses (docs/security.md says so): bytes between the samples."""
    fill_from(tmp_path, FILES)
    overwrite_in_place(tmp_path / CHECKPOINT_DIR / "model.safetensors", len(BIG) // 2)
    check_cache(tmp_path)
    with pytest.raises(CacheError, match=r"model.safetensors differs .* \(sha256\)"):
        check_cache(tmp_path, full=True)
    # A refill asked for a full check finds it too, and downloads again.
    _, downloaded = fill_from(tmp_path, FILES)
    assert downloaded == []
    _, downloaded = fill_from(tmp_path, FILES, full_check=True)
    assert sorted(downloaded) == sorted(FILES)
    check_cache(tmp_path, full=True)


def test_a_file_of_another_size_or_missing_is_found(tmp_path, fill_from):
    fill_from(tmp_path, FILES)
    with (tmp_path / CHECKPOINT_DIR / "model.safetensors").open("ab") as file:
        file.write(b"x")
    with pytest.raises(CacheError, match=f"holds {len(BIG) + 1} bytes where the fill verified"):
        check_cache(tmp_path)
    (tmp_path / CHECKPOINT_DIR / "model.safetensors").unlink()
    with pytest.raises(CacheError, match="model.safetensors is missing"):
        check_cache(tmp_path)


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def edit(data: dict) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value

    return edit


@pytest.mark.parametrize(
    "edit",
    [
        _set("version", 1),
        _set("directory", "../../etc"),
        _set("repo", "../../etc"),
        _set("files", "config.json", "size", -1),
        _set("files", "config.json", "sha256", "not hex"),
        _set("files", "../outside", {"size": 1, "sha256": "0" * 64, "sample_sha256": "0" * 64}),
    ],
)
def test_a_marker_no_fill_wrote_vouches_for_nothing(tmp_path, fill_from, edit):
    """Read back like input from the network: one field off and it is no marker."""
    fill_from(tmp_path, FILES)
    data = json.loads((tmp_path / MARKER_FILE).read_text())
    edit(data)
    (tmp_path / MARKER_FILE).write_text(json.dumps(data))
    with pytest.raises(CacheError, match=f"{MARKER_FILE} is missing, unreadable"):
        check_cache(tmp_path)
