"""Uploaded voices on disk (a PVC in Kubernetes): reference audio, profile, consent.

One folder per voice: `<voices_dir>/<voice_id>/{reference.wav, profile.json,
consent.json}`. A voice is written into a hidden temporary folder and renamed
into place, so a crash never leaves half a voice visible. Deleting a voice
removes all three files and the folder: an erasure, not a flag.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import json
import os
import re
import secrets
import shutil
from pathlib import Path

import numpy as np

from . import errors

AUDIO_FILE = "reference.wav"
PROFILE_FILE = "profile.json"
CONSENT_FILE = "consent.json"
_VOICE_ID = re.compile(r"^voice_[0-9a-f]{16}$")
DECODABLE = "WAV, FLAC, OGG (Vorbis/Opus) or MP3"


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


def decode_reference_audio(data: bytes, min_s: float, max_s: float) -> tuple[np.ndarray, int]:
    """Mono float32 samples and their rate, or a 400 saying what is wrong."""
    import soundfile

    if not data:
        raise errors.invalid_request("the audio file is empty", param="audio")
    try:
        pcm, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # libsndfile says "Format not recognised" etc.
        raise errors.invalid_request(f"could not decode the audio ({exc}); send {DECODABLE}", param="audio") from None
    mono = pcm.mean(axis=1)
    duration = len(mono) / rate if rate else 0.0
    if not np.all(np.isfinite(mono)):
        raise errors.invalid_request("the audio contains non-finite samples", param="audio")
    if duration < min_s or duration > max_s:
        raise errors.invalid_request(
            f"reference audio must last {min_s:g} to {max_s:g} seconds; this lasts {duration:.2f}", param="audio"
        )
    if float(np.abs(mono).max()) < 1e-4:
        raise errors.invalid_request("the reference audio is silent", param="audio")
    return mono, rate


class VoiceStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

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
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        staging = self.root / f".{voice_id}.tmp"
        staging.mkdir()
        try:
            audio_path = staging / AUDIO_FILE
            soundfile.write(audio_path, pcm, sample_rate, format="WAV", subtype="PCM_16")
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
            consent = {
                "voice_id": voice_id,
                "consent": True,
                "statement": consent_statement,
                "given_by": owner,
                "given_at": now,
                "audio_sha256": hashlib.sha256(audio_path.read_bytes()).hexdigest(),
            }
            _write_json(staging / PROFILE_FILE, profile)
            _write_json(staging / CONSENT_FILE, consent)
            os.rename(staging, self.root / voice_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self.get(voice_id, owner)

    def list(self, owner: str) -> list[Voice]:
        voices = []
        for folder in sorted(self.root.iterdir()):
            if _VOICE_ID.match(folder.name):
                voice = self._load(folder)
                if voice is not None and voice.owner == owner:
                    voices.append(voice)
        return voices

    def get(self, voice_id: str, owner: str) -> Voice:
        """The caller's voice, or 404: other callers' voices do not exist for them."""
        voice = self._load(self.root / voice_id) if _VOICE_ID.match(voice_id) else None
        if voice is None or voice.owner != owner:
            raise errors.not_found(f"no voice {voice_id!r}")
        return voice

    def delete(self, voice_id: str, owner: str) -> None:
        voice = self.get(voice_id, owner)
        folder = voice.audio_path.parent
        for name in (AUDIO_FILE, PROFILE_FILE, CONSENT_FILE):
            (folder / name).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)  # anything else that appeared
        _fsync_dir(self.root)

    def _load(self, folder: Path) -> Voice | None:
        try:
            profile = json.loads((folder / PROFILE_FILE).read_text())
        except (OSError, ValueError):
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
