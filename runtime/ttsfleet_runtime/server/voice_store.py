"""Uploaded voices: what is kept of one, and the interface both stores implement.

A stored voice is four things kept and erased together: the reference audio (mono
WAV at the model's rate, reference_audio.py), its profile (name, transcript,
owner, when it was uploaded and when it expires), the speaker's consent record,
and the prompt the engine computed from it once (`ClonedVoice.to_bytes()`), so
speaking it later costs no encoder work.

Two stores hold them: a directory for one pod (voice_store_local.py) and Redis,
shared by every replica of a TTSService (voice_store_redis.py); the server picks one
by its settings (voice_routes.open_store), and this module imports neither. Both
write a voice atomically (all four parts or none), erase it for real (no flag), keep
each owner (a tenant, auth.py) to its own voices and its quota, and treat a voice
past its expiry as gone at once: it is neither listed nor spoken, and
`erase_expired` (the server's sweeper) erases it. Stores are blocking: the server
calls them from worker threads. Listeners added with `on_erased` hear every erased
voice id, for Redis also those erased through other pods, so caches can forget them.

What a store reads back is checked like what arrives at the API: a record that
cannot be a voice (junk or missing profile fields, a key of the wrong type, an
index member that is no id) is a `BrokenRecord`. It is skipped wherever voices
are listed or swept, logged once and heard by `on_record_skipped` listeners (the
server counts it), never spoken, and still erasable: by its owner when the
store's index names one, and always by the admin.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime
import hashlib
import io
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable

import numpy as np

from . import errors

log = logging.getLogger(__name__)

SECONDS_PER_DAY = 86_400
# Why a record was skipped (the label of ttsfleet_voice_records_skipped_total).
SKIP_REASONS = ("profile", "wrong_type", "index", "prompt", "consent", "link")
_LOGGED_SKIPS_MAX = 1024  # skips logged once each; beyond this, counted only


class BrokenRecord(Exception):
    """A stored record that cannot be read as a voice (see the module docstring)."""

    def __init__(self, voice_id: str, reason: str, detail: str):
        assert reason in SKIP_REASONS, reason
        super().__init__(f"voice record {voice_id!r} is unreadable ({reason}): {detail}")
        self.voice_id = voice_id
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Voice:
    """A stored voice's profile: what the API shows and the stores decide by."""

    id: str
    name: str
    transcript: str
    language: str
    owner: str
    created_at: float  # unix seconds
    expires_at: float | None  # unix seconds; None: kept until deleted
    duration_s: float
    sample_rate: int
    stored_bytes: int  # all four parts: what the tenant's byte quota counts

    def public(self) -> dict:
        return {
            "id": self.id,
            "object": "voice",
            "name": self.name,
            "type": "uploaded",
            "language": self.language,
            "transcript": self.transcript,
            "duration_s": round(self.duration_s, 3),
            "created_at": _iso(self.created_at),
            "expires_at": None if self.expires_at is None else _iso(self.expires_at),
        }

    def profile(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_profile(cls, profile: object, voice_id: str) -> Voice:
        """The profile a store read back, checked field by field (BrokenRecord if not
        a voice's): a store's bytes are trusted no more than a request's."""
        if not isinstance(profile, dict):
            raise BrokenRecord(voice_id, "profile", "not a JSON object")
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in profile]
        if missing:
            raise BrokenRecord(voice_id, "profile", f"missing {', '.join(missing)}")
        for name, check in _PROFILE_FIELDS.items():
            if not check(profile[name]):
                raise BrokenRecord(voice_id, "profile", f"{name} has the wrong type or range")
        if profile["id"] != voice_id:
            raise BrokenRecord(voice_id, "profile", "its id is another voice's")
        return cls(**{f.name: profile[f.name] for f in dataclasses.fields(cls)})


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_PROFILE_FIELDS = {
    "id": lambda v: isinstance(v, str),
    "name": lambda v: isinstance(v, str),
    "transcript": lambda v: isinstance(v, str),
    "language": lambda v: isinstance(v, str),
    "owner": lambda v: isinstance(v, str) and v != "",
    "created_at": _number,
    "expires_at": lambda v: v is None or _number(v),
    "duration_s": lambda v: _number(v) and v >= 0,
    "sample_rate": lambda v: _count(v) and v > 0,
    "stored_bytes": _count,
}


@dataclasses.dataclass(frozen=True)
class VoiceRecord:
    """Everything stored for one voice, as one store writes it."""

    voice: Voice
    audio_wav: bytes
    consent: dict
    prompt: bytes  # ClonedVoice.to_bytes()


@dataclasses.dataclass(frozen=True)
class VoiceExport:
    """What a tenant may take away of its voice (GET .../export): not the prompt,
    which is derived data of one checkpoint."""

    voice: Voice
    audio_wav: bytes
    consent: dict


@dataclasses.dataclass(frozen=True)
class VoiceQuota:
    """What one tenant may keep: voices, and bytes of everything stored for them."""

    max_voices: int
    max_bytes: int


@dataclasses.dataclass(frozen=True)
class Erased:
    """One voice an erasure removed (or a staging leftover of a local upload);
    `where` is its folder or key, for the admin's record."""

    voice_id: str
    owner: str | None
    where: str
    staging: bool = False


def quota_exceeded(message: str) -> errors.ApiError:
    return errors.ApiError(409, message, code="voice_quota_exceeded", param="audio")


def storage_full(why: str) -> errors.ApiError:
    """The store has no room (a full disk, Redis at its memory limit): load on the
    store, not a fault of this server's code, so it is counted apart from those."""
    return errors.ApiError(
        507,
        f"the voice store is full ({why}), so this voice was not stored; "
        "delete voices you no longer need or retry later",
        code="insufficient_storage",
        type="server_error",
    )


def unknown_voice(voice_id: str) -> errors.ApiError:
    return errors.not_found(f"no voice {voice_id!r}")


def new_voice_id() -> str:
    return "voice_" + secrets.token_hex(8)


_VOICE_ID = re.compile(r"^voice_[0-9a-f]{16}$")


def is_voice_id(name: str) -> bool:
    """True for what `new_voice_id` makes: safe as a folder name and a key suffix."""
    return _VOICE_ID.match(name) is not None


class VoiceStore(abc.ABC):
    """Per-owner voices with quotas, retention and erasure (see the module docstring).

    `owner=None` in a method is the admin's view: every owner's voices.
    `clock` (unix seconds) is injectable so tests move time instead of waiting.
    """

    def __init__(
        self,
        quota: VoiceQuota | None = None,
        retention_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
        self.quota = quota
        self.retention_s = retention_s
        self.clock = clock
        self._listeners: list[Callable[[str], None]] = []
        self._skip_listeners: list[Callable[[str], None]] = []
        self._listeners_lock = threading.Lock()
        self._logged_skips: set[tuple[str, str]] = set()

    # What each store implements.

    @abc.abstractmethod
    def _commit(self, record: VoiceRecord) -> None:
        """Write all four parts or none; checks the owner's quota in the same step."""

    @abc.abstractmethod
    def _ids(self, owner: str | None) -> list[str]:
        """Ids of the owner's stored voices, expired ones included (every owner's for None)."""

    @abc.abstractmethod
    def _load(self, voice_id: str) -> Voice | None:
        """The voice's profile, expired or not; None when nothing is stored;
        BrokenRecord when something is stored that is not a voice."""

    @abc.abstractmethod
    def _indexed_owner(self, voice_id: str) -> str | None:
        """Whose the voice is by the store's index alone (its profile may be broken)."""

    @abc.abstractmethod
    def _read(self, voice_id: str, *parts: str) -> dict[str, bytes] | None:
        """Raw parts ("audio", "consent", "prompt") of a stored voice."""

    @abc.abstractmethod
    def _erase(self, voice_id: str, owner: str | None) -> Erased:
        """Remove everything stored for the voice (and its index entries)."""

    @abc.abstractmethod
    def existing(self, voice_ids: Iterable[str]) -> set[str]:
        """Which of these voices are still stored (the cache's reconciliation)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Where the voices are, for logs (never a credential)."""

    @abc.abstractmethod
    def watch(self) -> None:
        """Start hearing about erasures made elsewhere (a store shared by pods)."""

    @property
    @abc.abstractmethod
    def watching(self) -> bool:
        """False while erasures made elsewhere may go unheard (`watch` again)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop background work and release connections."""

    # Shared behaviour.

    def on_erased(self, listener: Callable[[str], None]) -> None:
        """Call `listener(voice_id)` for every voice this store learns was erased."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def _announce_erased(self, voice_id: str) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(voice_id)

    def on_record_skipped(self, listener: Callable[[str], None]) -> None:
        """Call `listener(reason)` for every broken record a read skips (SKIP_REASONS)."""
        with self._listeners_lock:
            self._skip_listeners.append(listener)

    def report_broken(self, broken: BrokenRecord) -> None:
        # Logged once per record and reason (a broken record is met on every listing);
        # counted every time, so a rate shows how often tenants meet it.
        with self._listeners_lock:
            key = (broken.voice_id, broken.reason)
            first = key not in self._logged_skips and len(self._logged_skips) < _LOGGED_SKIPS_MAX
            if first:
                self._logged_skips.add(key)
            listeners = list(self._skip_listeners)
        if first:
            log.warning(
                "skipped an unreadable voice record; erase it with `ttsfleet voices delete --id`",
                extra={"voice_id": broken.voice_id, "reason": broken.reason, "error": str(broken)},
            )
        for listener in listeners:
            listener(broken.reason)

    def _load_readable(self, voice_id: str) -> Voice | None:
        """`_load`, with a broken record skipped (reported, then treated as absent)."""
        try:
            return self._load(voice_id)
        except BrokenRecord as broken:
            self.report_broken(broken)
            return None

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
        prompt: bytes,
    ) -> Voice:
        """Store a new voice (409 when it does not fit the owner's quota)."""
        record = self._record(
            pcm=pcm,
            sample_rate=sample_rate,
            name=name,
            transcript=transcript,
            language=language,
            owner=owner,
            consent_statement=consent_statement,
            prompt=prompt,
        )
        self._commit(record)
        return record.voice

    def _record(self, *, pcm, sample_rate, owner, consent_statement, prompt, **profile):
        import soundfile

        voice_id = new_voice_id()
        now = self.clock()
        out = io.BytesIO()
        soundfile.write(out, pcm, sample_rate, format="WAV", subtype="PCM_16")
        audio_wav = out.getvalue()
        consent = {
            "voice_id": voice_id,
            "consent": True,
            "statement": consent_statement,
            "given_by": owner,
            "given_at": _iso(now),
            "audio_sha256": hashlib.sha256(audio_wav).hexdigest(),
        }
        # The profile's own size is a few hundred bytes: counted as a fixed allowance.
        stored = len(audio_wav) + len(prompt) + len(repr(consent)) + 1024
        voice = Voice(
            id=voice_id,
            owner=owner,
            created_at=now,
            expires_at=now + self.retention_s if self.retention_s > 0 else None,
            duration_s=len(pcm) / sample_rate,
            sample_rate=sample_rate,
            stored_bytes=stored,
            **profile,
        )
        return VoiceRecord(voice=voice, audio_wav=audio_wav, consent=consent, prompt=prompt)

    def check_quota(self, owner: str) -> None:
        """409 when the owner cannot add even one more voice (before any decoding)."""
        self._check_quota(self.list(owner), adding_bytes=0)

    def _check_quota(self, voices: list[Voice], adding_bytes: int) -> None:
        if self.quota is None:
            return
        used = sum(v.stored_bytes for v in voices)
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
        """The owner's unexpired voices, oldest first (every owner's for None)."""
        voices = [
            v for i in self._ids(owner) if (v := self._load_readable(i)) and not self.expired(v)
        ]
        return sorted(voices, key=lambda v: (v.created_at, v.id))

    def expired_ids(self, now: float) -> list[str]:
        """Voices whose expiry has passed but that are still (partly) stored."""
        return [
            i
            for i in self._ids(None)
            if (v := self._load_readable(i)) and v.expires_at is not None and v.expires_at <= now
        ]

    def expired(self, voice: Voice) -> bool:
        return voice.expires_at is not None and voice.expires_at <= self.clock()

    def get(self, voice_id: str, owner: str | None) -> Voice:
        """The caller's voice, or 404: other callers' and expired voices do not exist."""
        voice = self._load_readable(voice_id)
        if voice is None or self.expired(voice) or (owner is not None and voice.owner != owner):
            raise unknown_voice(voice_id)
        return voice

    def prompt(self, voice_id: str, owner: str | None) -> tuple[Voice, bytes]:
        """The voice and its computed prompt (`ClonedVoice.to_bytes()`), or 404."""
        voice = self.get(voice_id, owner)
        parts = self._read(voice_id, "prompt")
        if parts is None:
            raise unknown_voice(voice_id)
        return voice, parts["prompt"]

    def export(self, voice_id: str, owner: str | None) -> VoiceExport:
        """The voice's audio, profile and consent record, or 404."""
        import json

        voice = self.get(voice_id, owner)
        parts = self._read(voice_id, "audio", "consent")
        if parts is None:
            raise unknown_voice(voice_id)
        try:
            consent = json.loads(parts["consent"])
        except ValueError:  # not JSON, or not UTF-8
            consent = None
        if not isinstance(consent, dict):
            self.report_broken(BrokenRecord(voice_id, "consent", "not a JSON object"))
            raise unknown_voice(voice_id)
        return VoiceExport(voice, parts["audio"], consent)

    def delete(self, voice_id: str, owner: str | None) -> Erased:
        """Erase one voice (any owner's for None); 404 when the caller has none such.
        A broken record is erased too: by the owner the index names, or by the admin."""
        try:
            voice = self._load(voice_id)
            stored, stored_owner = voice is not None, voice.owner if voice else None
        except BrokenRecord as broken:
            self.report_broken(broken)
            stored, stored_owner = True, self._indexed_owner(voice_id)
        if not stored or (owner is not None and stored_owner != owner):
            raise unknown_voice(voice_id)
        erased = self._erase(voice_id, stored_owner)
        self._announce_erased(voice_id)
        return erased

    def erase_owner(self, owner: str) -> list[Erased]:
        """Everything stored for `owner`, expired voices included."""
        erased = []
        for voice_id in self._ids(owner):
            erased.append(self._erase(voice_id, owner))
            self._announce_erased(voice_id)
        return erased

    def erase_expired(self) -> list[Erased]:
        """Erase every voice past its expiry (the sweeper's pass)."""
        erased = []
        for voice_id in self.expired_ids(self.clock()):
            # By the index, not the profile: a broken profile must not stop the sweep.
            try:
                erased.append(self._erase(voice_id, self._indexed_owner(voice_id)))
            except errors.ApiError:
                raise  # the store itself is away: the next sweep starts over
            except Exception as exc:  # one voice that cannot be erased must not stop the rest
                log.warning(
                    "could not erase an expired voice; the next sweep retries",
                    extra={"voice_id": voice_id, "error": f"{type(exc).__name__}: {exc}"},
                )
                continue
            self._announce_erased(voice_id)
        return erased


def _iso(unix_s: float) -> str:
    return datetime.datetime.fromtimestamp(unix_s, datetime.UTC).isoformat(timespec="seconds")
