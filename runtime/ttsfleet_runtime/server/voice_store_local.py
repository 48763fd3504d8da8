"""Stored voices in a directory (a PVC in Kubernetes), for a single pod.

One folder per voice: `<root>/<voice_id>/{reference.wav, profile.json,
consent.json, prompt.npz}`. A voice is written into a hidden staging folder and
renamed into place, so a crash never leaves half a voice visible; the staging
leftovers of killed uploads are erased when the store opens (the directory
belongs to one server process; several replicas share voices through Redis,
voice_store_redis.py). Erasing a voice removes its files and its folder.
Profiles written before voices expired and carried prompts (an ISO `created_at`,
no `expires_at`) are read with the current retention, so they expire too.

Whoever can write the directory may plant links in it. No operation under the
root follows one: folders and files are opened relative to their parent's
descriptor with O_NOFOLLOW, and an erasure removes a planted link itself (or a
stray file), never what it points to. A link where a part should be makes the
voice a broken record (voice_store.py): skipped, never read through, erasable.
A full disk (ENOSPC, EDQUOT) refuses the upload with 507 and leaves nothing of it.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .voice_store import (
    BrokenRecord,
    Erased,
    Voice,
    VoiceQuota,
    VoiceRecord,
    VoiceStore,
    is_voice_id,
    storage_full,
)

AUDIO_FILE = "reference.wav"
PROFILE_FILE = "profile.json"
CONSENT_FILE = "consent.json"
PROMPT_FILE = "prompt.npz"
_PARTS = {"audio": AUDIO_FILE, "consent": CONSENT_FILE, "prompt": PROMPT_FILE}
_STAGING_PREFIX = ".voice_"
_STAGING_SUFFIX = ".tmp"
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# A part is opened without following a link (ELOOP) and without blocking on a FIFO.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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
        return [self._erase_entry(name) for name in self._staging_names()]

    def _commit(self, record: VoiceRecord) -> None:
        voice = record.voice
        staging = f"{_STAGING_PREFIX}{voice.id.removeprefix('voice_')}{_STAGING_SUFFIX}"
        with _opened_root(self.root) as root:
            try:
                os.mkdir(staging, 0o700, dir_fd=root)
                with _opened_folder(root, staging) as folder:
                    _create(folder, PROFILE_FILE, json.dumps(voice.profile(), indent=2).encode())
                    _create(folder, AUDIO_FILE, record.audio_wav)
                    _create(folder, PROMPT_FILE, record.prompt)
                    _create(folder, CONSENT_FILE, json.dumps(record.consent, indent=2).encode())
                    os.fsync(folder)
                # Quota check and commit are one step, also for parallel uploads (threads of
                # this store, other stores and processes on the directory: see _directory_lock).
                with _directory_lock(root):
                    self._check_quota(self.list(voice.owner), adding_bytes=voice.stored_bytes)
                    os.rename(staging, voice.id, src_dir_fd=root, dst_dir_fd=root)
            except BaseException as exc:
                _remove_entry(root, staging)
                if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
                    raise storage_full("no space left on its disk") from None
                raise
            os.fsync(root)  # the voice is in place: nothing after this may claim it is not

    def _ids(self, owner: str | None) -> list[str]:
        with _opened_root(self.root) as root:
            ids = sorted(name for name in os.listdir(root) if is_voice_id(name))
            if owner is None:
                return ids
            return [i for i in ids if _owner(root, i) == owner]

    def _load(self, voice_id: str) -> Voice | None:
        if not is_voice_id(voice_id):
            return None
        with _opened_root(self.root) as root:
            try:
                folder = os.open(voice_id, _FOLDER_FLAGS, dir_fd=root)
            except FileNotFoundError:
                return None
            except OSError as exc:  # ELOOP, ENOTDIR: a link or a file in the folder's place
                raise BrokenRecord(voice_id, "link", f"not a folder ({exc.strerror})") from None
            try:
                profile = _profile(folder)
                if profile is None:
                    raise BrokenRecord(voice_id, "profile", f"{PROFILE_FILE} is unreadable")
                if isinstance(profile.get("created_at"), str):  # written before retention
                    try:
                        created = datetime.datetime.fromisoformat(profile["created_at"])
                    except ValueError:
                        raise BrokenRecord(voice_id, "profile", "created_at is no date") from None
                    profile["created_at"] = created.timestamp()
                    retention = self.retention_s
                    profile["expires_at"] = created.timestamp() + retention if retention else None
                    profile["stored_bytes"] = _folder_bytes(folder)
                return Voice.from_profile(profile, voice_id)
            finally:
                os.close(folder)

    def _indexed_owner(self, voice_id: str) -> str | None:
        with _opened_root(self.root) as root:
            return _owner(root, voice_id)

    def _read(self, voice_id: str, *parts: str) -> dict[str, bytes] | None:
        with _opened_root(self.root) as root:
            try:
                with _opened_folder(root, voice_id) as folder:
                    return {part: _read_file(folder, _PARTS[part]) for part in parts}
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a planted link: never read through it
                    self.report_broken(BrokenRecord(voice_id, "link", "a part is a link"))
                return None  # erased meanwhile, or a voice stored before prompts were

    def _erase(self, voice_id: str, owner: str | None) -> Erased:
        return self._erase_entry(voice_id)

    def erase_owner(self, owner: str) -> list[Erased]:
        """Everything stored for `owner`: its voices and its uploads' staging leftovers."""
        erased = super().erase_owner(owner)
        with _opened_root(self.root) as root:
            leftovers = [n for n in self._staging_names() if _owner(root, n) == owner]
        return erased + [self._erase_entry(name) for name in leftovers]

    def existing(self, voice_ids: Iterable[str]) -> set[str]:
        with _opened_root(self.root) as root:
            return {i for i in voice_ids if is_voice_id(i) and _is_folder(root, i)}

    def _staging_names(self) -> list[str]:
        with _opened_root(self.root) as root:
            return sorted(
                n
                for n in os.listdir(root)
                if n.startswith(_STAGING_PREFIX) and n.endswith(_STAGING_SUFFIX)
            )

    def _erase_entry(self, name: str) -> Erased:
        """Remove one folder (or whatever was planted under its name) from the root."""
        staging = name.startswith(".")
        voice_id = "voice_" + name.removeprefix(_STAGING_PREFIX).removesuffix(_STAGING_SUFFIX)
        with _opened_root(self.root) as root:
            owner = _owner(root, name)
            _remove_entry(root, name)
            os.fsync(root)
        where = str(self.root / name)
        return Erased(voice_id if staging else name, owner, where, staging=staging)


@contextlib.contextmanager
def _opened_root(root: Path) -> Iterator[int]:
    # The root itself is the operator's setting and may be reached through a link.
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened_folder(parent: int, name: str) -> Iterator[int]:
    fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_file(folder: int, name: str) -> bytes:
    fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{name} is not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _create(folder: int, name: str, data: bytes) -> None:
    fd = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _profile(folder: int) -> dict | None:
    """The folder's profile.json as a JSON object, or None when it is not one."""
    try:
        profile = json.loads(_read_file(folder, PROFILE_FILE))
    except (OSError, ValueError):
        return None
    return profile if isinstance(profile, dict) else None


def _owner(root: int, name: str) -> str | None:
    """The owner named in the profile of the folder `name`, however broken the rest."""
    try:
        with _opened_folder(root, name) as folder:
            profile = _profile(folder)
    except OSError:
        return None
    owner = profile.get("owner") if profile else None
    return owner if isinstance(owner, str) else None


def _is_folder(root: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=root, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _folder_bytes(folder: int) -> int:
    total = 0
    try:
        for name in os.listdir(folder):
            total += os.stat(name, dir_fd=folder, follow_symlinks=False).st_size
    except OSError:  # erased while being counted: what is gone takes no space
        pass
    return total


def _remove_entry(parent: int, name: str) -> None:
    """Remove `name` under `parent`: a folder with everything in it, or a link or file
    planted in a folder's place (the entry itself, never its target). A folder's
    profile goes last, so a removal that fails half-way (EBUSY, EIO) leaves a voice
    that still says whose it is and when it expires: the next erasure or sweep retries."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)
        return
    try:
        with _opened_folder(parent, name) as folder:
            for entry in sorted(os.listdir(folder), key=lambda n: n == PROFILE_FILE):
                _remove_entry(folder, entry)
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        return  # removed meanwhile by another erasure


@contextlib.contextmanager
def _directory_lock(root: int):
    """An exclusive flock on the directory itself: every store open on it (in this
    process or another) commits one voice at a time, and no lock file is left there.
    Each call opens its own descriptor, and flock locks of different descriptors exclude
    each other, so threads of one store wait for each other too."""
    fd = os.open(".", os.O_RDONLY | os.O_CLOEXEC, dir_fd=root)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
