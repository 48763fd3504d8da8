"""Stored voices in a directory (a PVC in Kubernetes), for a single pod.

One folder per voice: `<root>/<voice_id>/{reference.wav, profile.json,
consent.json, prompt.npz}`. A voice is written into a hidden staging folder and
renamed into place, so a crash never leaves half a voice visible; the staging
leftovers of killed uploads are erased when the store opens (the directory
belongs to one server process; several replicas share voices through Redis,
voice_store_redis.py). Erasing a voice removes its files and its folder.
Profiles written before voices expired and carried prompts (an ISO `created_at`,
no `expires_at`) are read with the current retention, so they expire too.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from .voice_store import Erased, Voice, VoiceQuota, VoiceRecord, VoiceStore

AUDIO_FILE = "reference.wav"
PROFILE_FILE = "profile.json"
CONSENT_FILE = "consent.json"
PROMPT_FILE = "prompt.npz"
_PARTS = {"audio": AUDIO_FILE, "consent": CONSENT_FILE, "prompt": PROMPT_FILE}
_VOICE_ID = re.compile(r"^voice_[0-9a-f]{16}$")
_STAGING_SUFFIX = ".tmp"


class LocalVoiceStore(VoiceStore):
    """The voices directory. A staging folder `.voice_<id>.tmp` gets `profile.json`
    (with the owner) first, so even a leftover of a killed upload says whose it is."""

    def __init__(
        self,
        root: Path,
        quota: VoiceQuota | None = None,
        retention_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(quota, retention_s, clock)
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"directory {self.root}"

    # Erasures go through this process, or (the admin's command) are found by the
    # server's reconciliation: there is nothing to subscribe to, nothing to close.
    def watch(self) -> None:
        return None

    @property
    def watching(self) -> bool:
        return True

    def close(self) -> None:
        return None

    def remove_staging_leftovers(self) -> list[Erased]:
        """Erase what uploads killed mid-way left behind (only safe while no upload runs)."""
        return [self._erase_folder(folder) for folder in self._staging_folders()]

    def _commit(self, record: VoiceRecord) -> None:
        voice = record.voice
        staging = self.root / f".{voice.id}{_STAGING_SUFFIX}"
        staging.mkdir()
        try:
            _write(staging / PROFILE_FILE, json.dumps(voice.profile(), indent=2).encode())
            _write(staging / AUDIO_FILE, record.audio_wav)
            _write(staging / PROMPT_FILE, record.prompt)
            _write(staging / CONSENT_FILE, json.dumps(record.consent, indent=2).encode())
            # Quota check and commit are one step, also for parallel uploads (threads of
            # this store, other stores and processes on the directory: see _directory_lock).
            with _directory_lock(self.root):
                self._check_quota(self.list(voice.owner), adding_bytes=voice.stored_bytes)
                os.rename(staging, self.root / voice.id)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _ids(self, owner: str | None) -> list[str]:
        ids = sorted(p.name for p in self.root.iterdir() if _VOICE_ID.match(p.name))
        if owner is None:
            return ids
        return [i for i in ids if _profile(self.root / i).get("owner") == owner]

    def _load(self, voice_id: str) -> Voice | None:
        if not _VOICE_ID.match(voice_id):
            return None
        folder = self.root / voice_id
        profile = _profile(folder)
        if not profile:
            return None
        if isinstance(profile.get("created_at"), str):  # written before retention
            created = datetime.datetime.fromisoformat(profile["created_at"]).timestamp()
            profile["created_at"] = created
            profile["expires_at"] = created + self.retention_s if self.retention_s > 0 else None
            profile["stored_bytes"] = _folder_bytes(folder)
        try:
            return Voice.from_profile(profile)
        except (KeyError, TypeError):
            return None

    def _read(self, voice_id: str, *parts: str) -> dict[str, bytes] | None:
        folder = self.root / voice_id
        try:
            return {part: (folder / _PARTS[part]).read_bytes() for part in parts}
        except OSError:  # erased meanwhile, or a voice stored before prompts were
            return None

    def _erase(self, voice_id: str, owner: str | None) -> Erased:
        return self._erase_folder(self.root / voice_id)

    def erase_owner(self, owner: str) -> list[Erased]:
        """Everything stored for `owner`: its voices and its uploads' staging leftovers."""
        erased = super().erase_owner(owner)
        for folder in self._staging_folders():
            if _profile(folder).get("owner") == owner:
                erased.append(self._erase_folder(folder))
        return erased

    def existing(self, voice_ids: Iterable[str]) -> set[str]:
        return {i for i in voice_ids if _VOICE_ID.match(i) and (self.root / i).is_dir()}

    def _staging_folders(self) -> list[Path]:
        return sorted(p for p in self.root.glob(f".voice_*{_STAGING_SUFFIX}") if p.is_dir())

    def _erase_folder(self, folder: Path) -> Erased:
        profile = _profile(folder)
        staging = folder.name.endswith(_STAGING_SUFFIX)
        voice_id = folder.name.lstrip(".").removesuffix(_STAGING_SUFFIX)
        for name in (AUDIO_FILE, PROMPT_FILE, PROFILE_FILE, CONSENT_FILE):
            (folder / name).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)  # anything else that appeared
        _fsync_dir(self.root)
        return Erased(voice_id, profile.get("owner"), str(folder), staging=staging)


def _profile(folder: Path) -> dict:
    try:
        profile = json.loads((folder / PROFILE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return profile if isinstance(profile, dict) else {}


def _folder_bytes(folder: Path) -> int:
    total = 0
    try:
        for path in folder.iterdir():
            total += path.stat().st_size
    except OSError:  # erased while being counted: what is gone takes no space
        pass
    return total


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _directory_lock(root: Path):
    """An exclusive flock on the directory itself: every store open on it (in this
    process or another) commits one voice at a time, and no lock file is left there.
    Each call opens its own descriptor, and flock locks of different descriptors exclude
    each other, so threads of one store wait for each other too."""
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
