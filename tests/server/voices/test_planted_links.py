"""The voices directory follows no link planted in it: erasure, start-up cleanup and
export touch the link itself, never its target, and a voice whose profile cannot be
read is still erased by the admin's command. Real files, real links."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from support.runtime import ttsfleet
from support.voices import Clock, store_voice, tmpfs
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.voice_store_local import LocalVoiceStore

SECRET = b"another file's bytes"


@pytest.fixture
def outside(tmp_path):
    """A folder outside the voices directory that a link will point into."""
    folder = tmp_path / "outside"
    folder.mkdir()
    for name in ("reference.wav", "profile.json", "prompt.npz", "consent.json", "secret"):
        (folder / name).write_bytes(SECRET)
    return folder


@pytest.fixture
def store(tmp_path) -> LocalVoiceStore:
    return LocalVoiceStore(tmp_path / "voices")


def untouched(folder) -> bool:
    return sorted(p.name for p in folder.iterdir()) == sorted(
        ["reference.wav", "profile.json", "prompt.npz", "consent.json", "secret"]
    ) and all(p.read_bytes() == SECRET for p in folder.iterdir())


def test_erasing_a_voice_folder_that_is_a_link_removes_the_link_only(store, outside):
    planted = store.root / "voice_00000000000000ee"
    planted.symlink_to(outside, target_is_directory=True)
    (outside / "profile.json").write_text(json.dumps({"owner": "tenant-a"}))
    good = store_voice(store)
    assert [v.id for v in store.list(None)] == [good.id]  # the link is no voice
    # A tenant's erasure goes by profiles it can read without following a link...
    assert [e.voice_id for e in store.erase_owner("tenant-a")] == [good.id]
    (outside / "profile.json").write_bytes(SECRET)
    assert untouched(outside)
    # ...and the admin's erasure by id removes the link itself.
    erased = store.delete(planted.name, owner=None)
    assert erased.voice_id == planted.name
    assert not os.path.lexists(planted) and untouched(outside)


def test_export_never_reads_through_a_planted_part(store, outside):
    voice = store_voice(store)
    audio = store.root / voice.id / "reference.wav"
    audio.unlink()
    audio.symlink_to(outside / "secret")
    with pytest.raises(errors.ApiError) as refused:
        store.export(voice.id, "tenant-a")
    assert refused.value.status == 404
    store.delete(voice.id, "tenant-a")
    assert not (store.root / voice.id).exists() and untouched(outside)


def test_start_up_cleanup_removes_a_planted_staging_link_only(store, outside):
    (store.root / ".voice_00000000000000dd.tmp").symlink_to(outside, target_is_directory=True)
    (store.root / ".voice_00000000000000cc.tmp").mkdir()
    (store.root / ".voice_00000000000000cc.tmp" / "profile.json").symlink_to(outside / "secret")
    leftovers = store.remove_staging_leftovers()
    assert sorted(e.voice_id for e in leftovers) == [
        "voice_00000000000000cc",
        "voice_00000000000000dd",
    ]
    assert list(store.root.iterdir()) == [] and untouched(outside)


def test_a_voice_whose_profile_is_unreadable_is_erased_by_id(store):
    voice = store_voice(store)
    (store.root / voice.id / "profile.json").write_text("{not json")
    assert store.list(None) == []  # skipped...
    result = subprocess.run(
        ttsfleet("voices", "delete", "--id", voice.id, "--voices-dir", str(store.root)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr  # ...and still erasable
    assert f"erased voice {voice.id}" in result.stdout
    assert list(store.root.iterdir()) == []


def test_a_profile_that_is_a_link_is_not_read(store, outside):
    voice = store_voice(store)
    profile = store.root / voice.id / "profile.json"
    (outside / "profile.json").write_text(json.dumps({**voice.profile(), "owner": "tenant-b"}))
    profile.unlink()
    profile.symlink_to(outside / "profile.json")
    assert store.list("tenant-b") == [] and store.list("tenant-a") == []
    with pytest.raises(errors.ApiError):
        store.get(voice.id, "tenant-b")


def test_a_voice_that_cannot_be_erased_does_not_stop_the_sweep(tmp_path):
    """A mount point inside a voice folder (EBUSY on its removal): the sweeper logs it,
    erases every other expired voice, and retries it on its next pass."""
    from support.voice_uploads import DAY

    clock = Clock()
    store = LocalVoiceStore(tmp_path / "voices", retention_s=DAY, clock=clock)
    stuck, other = store_voice(store), store_voice(store, owner="tenant-b")
    mount_point = store.root / stuck.id / "mounted"
    mount_point.mkdir()
    with tmpfs(mount_point, "size=16k"):
        clock.advance(2 * DAY)
        assert [e.voice_id for e in store.erase_expired()] == [other.id]
    assert [e.voice_id for e in store.erase_expired()] == [stuck.id]
    assert list(store.root.iterdir()) == []
