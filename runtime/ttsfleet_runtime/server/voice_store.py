"""Uploaded voices on disk (a PVC in Kubernetes): reference audio, profile, consent.

One folder per voice: `<voices_dir>/<voice_id>/{reference.wav, profile.json,
consent.json}`; the audio is mono at the model's rate (reference_audio.py). A
voice is written into a hidden staging folder and renamed into place, so a
crash never leaves half a voice visible, and the server erases staging
leftovers when it starts. Deleting a voice removes all three files and the
folder: an erasure, not a flag. Each owner (a tenant, auth.py) sees only its
own voices and keeps at most its quota of voices and bytes.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from pathlib import Path

import numpy as np

from . import errors

AUDIO_FILE = "reference.wav"
PROFILE_FILE = "profile.json"
CONSENT_FILE = "consent.json"
_VOICE_ID = re.compile(r"^voice_[0-9a-f]{16}$")


@dataclasses.dataclass(frozen=True)
class Voice:
    id: str
    name: str
    transcript: str
    language: str
    owner: str
    created_at: str
    duration_s: float
    sample_rate: int
    audio_path: Path

    def public(self) -> dict:
        return {
            "id": self.id,
            "object": "voice",
            "name": self.name,
            "type": "uploaded",
            "language": self.language,
            "transcript": self.transcript,
            "duration_s": round(self.duration_s, 3),
            "created_at": self.created_at,
        }


@dataclasses.dataclass(frozen=True)
class VoiceQuota:
    """What one tenant may keep: voices and bytes on disk (all files of its voices)."""

    max_voices: int
    max_bytes: int


@dataclasses.dataclass(frozen=True)
class Erased:
    """One folder an erasure removed: a voice, or a staging leftover of an upload."""

    voice_id: str
    owner: str | None
    path: Path
    staging: bool = False


def quota_exceeded(message: str) -> errors.ApiError:
    return errors.ApiError(409, message, code="voice_quota_exceeded", param="audio")


class VoiceStore:
    """The voices directory: per-owner voices, quotas, erasure.

    Writes go through a staging folder `.voice_<id>.tmp` whose `profile.json`
    (with the owner) is written first, so even a leftover of a killed upload
    says whose it is. The server removes every leftover at start-up
    (`remove_staging_leftovers`); the directory belongs to one server process.
    """

    def __init__(self, root: Path, quota: VoiceQuota | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.quota = quota
        # Quota check and commit are one step, also for parallel uploads.
        self._commit_lock = threading.Lock()

    def remove_staging_leftovers(self) -> list[Erased]:
        """Erase what uploads killed mid-way left behind (only safe while no upload runs)."""
        return [self._erase_folder(folder) for folder in self._staging_folders()]

    def create(
        self,
        *,
        pcm: np.ndarray,
        sample_rate: int,
        name: str,
        transcript: str,
        language: str,
        owner: str,
        consent_statement: str,
    ) -> Voice:
        import soundfile

        voice_id = "voice_" + secrets.token_hex(8)
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        staging = self.root / f".{voice_id}{_STAGING_SUFFIX}"
        staging.mkdir()
        try:
            profile = {
                "id": voice_id,
                "name": name,
                "transcript": transcript,
                "language": language,
                "owner": owner,
                "created_at": now,
                "duration_s": len(pcm) / sample_rate,
                "sample_rate": sample_rate,
            }
            _write_json(staging / PROFILE_FILE, profile)
            audio_path = staging / AUDIO_FILE
            with open(audio_path, "wb") as f:
                soundfile.write(f, pcm, sample_rate, format="WAV", subtype="PCM_16")
                f.flush()
                os.fsync(f.fileno())
            consent = {
                "voice_id": voice_id,
                "consent": True,
                "statement": consent_statement,
                "given_by": owner,
                "given_at": now,
                "audio_sha256": hashlib.sha256(audio_path.read_bytes()).hexdigest(),
            }
            _write_json(staging / CONSENT_FILE, consent)
            with self._commit_lock:
                self._check_quota(owner, adding_bytes=_folder_bytes(staging))
                os.rename(staging, self.root / voice_id)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self.get(voice_id, owner)

    def check_quota(self, owner: str) -> None:
        """409 when the owner cannot add even one more voice (before any decoding)."""
        self._check_quota(owner, adding_bytes=0)

    def _check_quota(self, owner: str, adding_bytes: int) -> None:
        if self.quota is None:
            return
        voices = self.list(owner)
        used = sum(_folder_bytes(v.audio_path.parent) for v in voices)
        if len(voices) + 1 > self.quota.max_voices:
            raise quota_exceeded(
                f"voice quota reached: {len(voices)} of {self.quota.max_voices} voices; "
                "delete one to upload another"
            )
        if used + adding_bytes > self.quota.max_bytes:
            raise quota_exceeded(
                f"voice storage quota reached: {used} bytes used of {self.quota.max_bytes}"
                + (f", this voice needs {adding_bytes}" if adding_bytes else "")
                + "; delete a voice to make room"
            )

    def list(self, owner: str | None) -> list[Voice]:
        """The owner's voices (every owner's for None: the admin's view)."""
        voices = []
        for folder in sorted(self.root.iterdir()):
            if _VOICE_ID.match(folder.name):
                voice = self._load(folder)
                if voice is not None and (owner is None or voice.owner == owner):
                    voices.append(voice)
        return voices

    def get(self, voice_id: str, owner: str | None) -> Voice:
        """The caller's voice, or 404: other callers' voices do not exist for them."""
        voice = self._load(self.root / voice_id) if _VOICE_ID.match(voice_id) else None
        if voice is None or (owner is not None and voice.owner != owner):
            raise errors.not_found(f"no voice {voice_id!r}")
        return voice

    def delete(self, voice_id: str, owner: str | None) -> Erased:
        """Erase one voice (any owner's for None)."""
        voice = self.get(voice_id, owner)
        return self._erase_folder(voice.audio_path.parent)

    def erase_owner(self, owner: str) -> list[Erased]:
        """Everything stored for `owner`: its voices and its uploads' staging leftovers."""
        erased = [self._erase_folder(v.audio_path.parent) for v in self.list(owner)]
        for folder in self._staging_folders():
            if _profile(folder).get("owner") == owner:
                erased.append(self._erase_folder(folder))
        return erased

    def _staging_folders(self) -> list[Path]:
        return sorted(p for p in self.root.glob(f".voice_*{_STAGING_SUFFIX}") if p.is_dir())

    def _erase_folder(self, folder: Path) -> Erased:
        profile = _profile(folder)
        staging = folder.name.endswith(_STAGING_SUFFIX)
        voice_id = folder.name.lstrip(".").removesuffix(_STAGING_SUFFIX)
        for name in (AUDIO_FILE, PROFILE_FILE, CONSENT_FILE):
            (folder / name).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)  # anything else that appeared
        _fsync_dir(self.root)
        return Erased(voice_id=voice_id, owner=profile.get("owner"), path=folder, staging=staging)

    def _load(self, folder: Path) -> Voice | None:
        profile = _profile(folder)
        if not profile:
            return None
        return Voice(
            id=profile["id"],
            name=profile["name"],
            transcript=profile["transcript"],
            language=profile["language"],
            owner=profile["owner"],
            created_at=profile["created_at"],
            duration_s=profile["duration_s"],
            sample_rate=profile["sample_rate"],
            audio_path=folder / AUDIO_FILE,
        )


_STAGING_SUFFIX = ".tmp"


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


def _write_json(path: Path, value: dict) -> None:
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
