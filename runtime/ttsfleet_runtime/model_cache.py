"""The model cache volume's layout and the fill's exit codes: the contract between the
operator, which renders the volume, the fill Job and the pods that mount it, and
`ttsfleet-runtime fetch` (checkpoint/fetch.py), which fills it.

A filled cache volume holds:

- `FILLS_DIR/<name>/`: the checkpoint of one fill, downloaded and verified there while
  the previous fill's folder stays untouched;
- `CHECKPOINT_DIR`: a symbolic link the fill itself makes, `FILLS_DIR/<name>`, swapped
  in one `rename` once the new folder is verified (what the pods load, `/models/checkpoint`);
- `MARKER_FILE`, written after the swap: the repository, the revision asked for, the
  commit it resolved to, the folder it vouches for, and every file's size, sha256 and
  sha256 of a sample (first and last MiB);
- the empty directory `COMPILE_CACHE_DIR`.

Why a link and not a directory rename: a directory cannot replace a non-empty one in one
`rename` (Linux's RENAME_EXCHANGE would, but network file systems, where ReadWriteMany
caches live, refuse it), while `os.replace` of a link is atomic everywhere. So readers
never follow a link they did not expect: `check_cache` accepts `CHECKPOINT_DIR` only as
the link to the folder the marker names, and opens everything else with O_NOFOLLOW, so
a link planted inside the volume is refused, not read. No marker, a marker that names
another folder, or a file that differs from it: not filled.

A fill that cannot succeed by retrying exits with one of `PERMANENT_FAILURES`' codes;
the operator turns each into a `podFailurePolicy` rule that fails the Job at once, and
reads the rule's index back from the Job's Failed condition as the cache's reason. Any
other non-zero exit (the network, the hub's 5xx) is retried by the Job's backoff.

Standard library only: the operator imports it (see the import-linter contracts).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import secrets
import stat
from pathlib import Path

CHECKPOINT_DIR = "checkpoint"
FILLS_DIR = "fills"
# The one part of the volume the pods write: their compiled kernels (`--compile-cache-dir`,
# keyed inside by versions and GPU model), so a new pod loads what an earlier one compiled.
# The fill makes it, so it belongs to the pods' user: a directory the kubelet makes for a
# subPath mount would belong to root.
COMPILE_CACHE_DIR = "compile-cache"
MARKER_FILE = "ttsfleet-model.json"
# Version 1 recorded sizes only: such a volume reads as not filled and is filled again.
MARKER_VERSION = 2
# A marker is a few hundred bytes a file; anything far larger is not one the fill wrote.
MARKER_MAX_BYTES = 4 * 2**20
# The cheap check at start reads this much of each end of a file.
SAMPLE_BYTES = 2**20
HASH_CHUNK_BYTES = 8 * 2**20

# A hub repository id `owner/name`: letters, digits and `_`, runs joined by single
# `.` or `-` (the hub refuses `..` and `--`); so never `..`, never a path. The CRD
# carries the same patterns (the operator's grammar.py imports them), so the API server,
# `ttsfleet render` and `fetch` refuse the same strings. RE2-safe: see grammar.py.
_HUB_PART = "[A-Za-z0-9_]+([.-][A-Za-z0-9_]+)*"
HUB_REPO_ID = f"^{_HUB_PART}/{_HUB_PART}$"
HUB_REPO_ID_MAX = 200
# A hub revision: a commit, tag or branch (`main`, `v1.0`, `refs/pr/1`); `/`-separated
# components that start with a letter, digit or `_` and never hold `..`.
_REVISION_COMPONENT = r"[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*"
HUB_REVISION = f"^{_REVISION_COMPONENT}(/{_REVISION_COMPONENT})*$"
HUB_REVISION_MAX = 64
# The name of one fill's folder under FILLS_DIR (the fill makes it: commit and a nonce).
_FILL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class FetchFailure:
    exit_code: int
    reason: str  # CamelCase, as a status condition's reason
    message: str


PERMANENT_FAILURES: tuple[FetchFailure, ...] = (
    FetchFailure(
        3, "HubUnauthorized", "the hub refused the token, or the repository is gated or private"
    ),
    FetchFailure(4, "RevisionNotFound", "the hub has no such repository or revision"),
    FetchFailure(
        5, "VerificationFailed", "the downloaded files differ from the hub's sizes or hashes"
    ),
    FetchFailure(
        6,
        "InvalidReference",
        "the repository id is not owner/name or the revision is not a branch, tag or commit",
    ),
    FetchFailure(
        7, "UnsafeVolume", "the volume holds a symbolic link where the fill writes or reads"
    ),
)
FAILURE_BY_CODE = {failure.exit_code: failure for failure in PERMANENT_FAILURES}


def reference_problem(repo: str, revision: str) -> str | None:
    """Why `repo` at `revision` cannot name a hub checkpoint, or None when it can."""
    if len(repo) > HUB_REPO_ID_MAX or not re.fullmatch(HUB_REPO_ID, repo):
        return (
            f"{repo!r} is not a hub repository id: give owner/name, e.g. "
            "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
        )
    if len(revision) > HUB_REVISION_MAX or not re.fullmatch(HUB_REVISION, revision):
        return f"{revision!r} is not a hub revision: give a branch, tag or commit, e.g. main"
    return None


class CacheError(Exception):
    """The volume does not hold what its marker vouches for; the message names the file
    and the fix."""


@dataclasses.dataclass(frozen=True)
class VerifiedFile:
    """One file as the fill verified it."""

    size: int
    sha256: str
    # sha256 of the first and last SAMPLE_BYTES (the whole file when it is smaller).
    sample_sha256: str


@dataclasses.dataclass(frozen=True)
class Marker:
    """What a filled cache holds: `repo` at `revision` (as asked), resolved to `commit`,
    in `FILLS_DIR/directory`."""

    repo: str
    revision: str
    commit: str
    directory: str
    # Relative path -> what the fill verified, for every file of the revision.
    files: dict[str, VerifiedFile]

    def holds(self, repo: str, revision: str) -> bool:
        return self.repo == repo and revision in (self.revision, self.commit)

    def link_target(self) -> str:
        return f"{FILLS_DIR}/{self.directory}"


def is_relative_file_path(path: str) -> bool:
    """A path inside a folder: `/`-separated, no empty, `.` or `..` component."""
    parts = path.split("/")
    return all(part not in ("", ".", "..") and "\0" not in part for part in parts)


def _marker_from(data) -> Marker | None:
    """The marker `data` (parsed JSON) describes, validated like input from the network."""
    if not isinstance(data, dict) or data.get("version") != MARKER_VERSION:
        return None
    repo, revision, commit = data.get("repo"), data.get("revision"), data.get("commit")
    directory, files = data.get("directory"), data.get("files")
    texts = (repo, revision, commit, directory)
    if not all(isinstance(text, str) for text in texts) or not isinstance(files, dict):
        return None
    if reference_problem(repo, revision) or reference_problem(repo, commit):
        return None
    if not _FILL_NAME.fullmatch(directory):
        return None
    verified = {}
    for path, entry in files.items():
        if not is_relative_file_path(path) or not isinstance(entry, dict):
            return None
        size, sha256, sample = entry.get("size"), entry.get("sha256"), entry.get("sample_sha256")
        if type(size) is not int or size < 0:
            return None
        if not all(isinstance(h, str) and _SHA256.fullmatch(h) for h in (sha256, sample)):
            return None
        verified[path] = VerifiedFile(size, sha256, sample)
    return Marker(repo, revision, commit, directory, verified)


def open_directory(name: str, dir_fd: int | None = None) -> int:
    """A directory's descriptor; OSError (ELOOP) when `name` itself is a symbolic link."""
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def open_inside(dir_fd: int, path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """`path` (relative) under the directory `dir_fd`, following no symbolic link on the
    way: every component is opened with O_NOFOLLOW from the one before (openat-style)."""
    *parents, name = path.split("/")
    opened = []
    try:
        for parent in parents:
            opened.append(open_directory(parent, opened[-1] if opened else dir_fd))
        at = opened[-1] if opened else dir_fd
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=at)
    finally:
        for fd in opened:
            os.close(fd)


def _read_exactly(fd: int, size: int, offset: int) -> bytes:
    chunks, done = [], 0
    while done < size:
        chunk = os.pread(fd, size - done, offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def sample_sha256(fd: int, size: int) -> str:
    """sha256 of the first and last SAMPLE_BYTES of the open file `fd` of `size` bytes."""
    digest = hashlib.sha256()
    if size <= 2 * SAMPLE_BYTES:
        digest.update(_read_exactly(fd, size, 0))
    else:
        digest.update(_read_exactly(fd, SAMPLE_BYTES, 0))
        digest.update(_read_exactly(fd, SAMPLE_BYTES, size - SAMPLE_BYTES))
    return digest.hexdigest()


def full_sha256(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, HASH_CHUNK_BYTES, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _read_marker_at(root_fd: int) -> Marker | None:
    try:
        fd = os.open(MARKER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = _read_exactly(fd, MARKER_MAX_BYTES + 1, 0)
    finally:
        os.close(fd)
    if len(text) > MARKER_MAX_BYTES:
        return None
    try:
        return _marker_from(json.loads(text))
    except ValueError:
        return None


def read_marker(root: Path) -> Marker | None:
    """The marker of a cache volume mounted at `root`, or None when it was never filled
    (or by an older fetch, or the marker is a link, half written or foreign)."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_marker_at(root_fd)
    finally:
        os.close(root_fd)


def write_marker(root_fd: int, marker: Marker) -> None:
    """Atomically: a reader sees no marker or the whole one, never half of it. The
    temporary file has a fresh name and is created exclusively (O_EXCL fails on any link
    planted there), so the write goes nowhere but into the volume."""
    data = {"version": MARKER_VERSION, **dataclasses.asdict(marker)}
    text = json.dumps(data, indent=2, sort_keys=True).encode() + b"\n"
    staging = f".{MARKER_FILE}.{secrets.token_hex(8)}.tmp"
    fd = open_inside(root_fd, staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        os.write(fd, text)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staging, MARKER_FILE, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    os.fsync(root_fd)


def _file_problem(fill_fd: int, path: str, expected: VerifiedFile, full: bool) -> str | None:
    try:
        fd = open_inside(fill_fd, path)
    except FileNotFoundError:
        return "is missing"
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            return "is a symbolic link or lies under one"
        return f"cannot be read ({error.strerror})"
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return "is not a regular file"
        if status.st_size != expected.size:
            return f"holds {status.st_size} bytes where the fill verified {expected.size}"
        if full:
            if full_sha256(fd) != expected.sha256:
                return "differs from the bytes the fill verified (sha256)"
        elif sample_sha256(fd, status.st_size) != expected.sample_sha256:
            return "differs from the bytes the fill verified (sha256 of its first and last MiB)"
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    finally:
        os.close(fd)
    return None


def check_cache(root: Path, full: bool = False) -> Marker:
    """The marker of the volume at `root` once every file it vouches for is as the fill
    verified it: sizes and a sample of each file's bytes, or (`full`) every byte.
    CacheError, naming the file and the fix, otherwise."""
    refill = "run `ttsfleet-runtime fetch` again to fill the cache"
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise CacheError(f"the model cache {root} cannot be opened ({error.strerror})") from None
    try:
        marker = _read_marker_at(root_fd)
        if marker is None:
            raise CacheError(
                f"{root}/{MARKER_FILE} is missing, unreadable or from an older fetch, so "
                f"nothing vouches for {root}/{CHECKPOINT_DIR}: {refill}"
            )
        try:
            target = os.readlink(CHECKPOINT_DIR, dir_fd=root_fd)
        except OSError:
            target = None
        if target != marker.link_target():
            raise CacheError(
                f"{root}/{CHECKPOINT_DIR} is not the link to {marker.link_target()} that "
                f"{MARKER_FILE} vouches for: {refill}"
            )
        try:
            fills_fd = open_directory(FILLS_DIR, root_fd)
        except OSError:
            raise CacheError(f"{root}/{FILLS_DIR} is not a directory: {refill}") from None
        try:
            try:
                fill_fd = open_directory(marker.directory, fills_fd)
            except OSError:
                raise CacheError(
                    f"{root}/{marker.link_target()} is not a directory: {refill}"
                ) from None
            try:
                for path, expected in sorted(marker.files.items()):
                    problem = _file_problem(fill_fd, path, expected, full)
                    if problem is not None:
                        raise CacheError(f"{root}/{CHECKPOINT_DIR}/{path} {problem}: {refill}")
            finally:
                os.close(fill_fd)
        finally:
            os.close(fills_fd)
        return marker
    finally:
        os.close(root_fd)


def _json_object_problem(path: Path) -> str | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return f"{path} is missing"
    except OSError as error:
        return f"{path} cannot be read ({error.strerror})"
    except ValueError:
        return f"{path} is not JSON"
    if not isinstance(data, dict):
        return f"{path} is not a JSON object"
    return None


def checkpoint_problem(checkpoint: Path) -> str | None:
    """What keeps `checkpoint` (a local folder in the official layout) from loading: the
    configuration, the text tokenizer, the weights and the speech tokenizer's folder;
    None when they are all there. Named here so that a bad folder is refused with a
    sentence at start, not a traceback from deep inside the loaders."""
    for name in ("config.json", "speech_tokenizer/config.json"):
        problem = _json_object_problem(checkpoint / name)
        if problem is not None:
            return problem
    if not (checkpoint / "tokenizer.json").is_file():
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            if not (checkpoint / name).is_file():
                return f"{checkpoint / name} is missing (and so is tokenizer.json)"
    weights = ("model.safetensors", "model.safetensors.index.json")
    if not any((checkpoint / name).is_file() for name in weights):
        return f"{checkpoint / weights[0]} is missing"
    return None


def check_checkpoint(checkpoint: Path, full: bool = False) -> None:
    """Refuse (CacheError, one sentence) a local checkpoint folder that cannot load; when
    it is a model cache's (`<root>/checkpoint` beside a marker or fills), also one whose
    files differ from what the fill verified."""
    root = checkpoint.parent
    is_cache = checkpoint.name == CHECKPOINT_DIR and any(
        os.path.lexists(root / name) for name in (MARKER_FILE, FILLS_DIR)
    )
    if is_cache:
        check_cache(root, full)
    problem = checkpoint_problem(checkpoint)
    if problem is not None:
        fix = (
            "fill the cache from a repository that holds a whole checkpoint"
            if is_cache
            else "point --model at a whole checkpoint"
        )
        raise CacheError(f"{problem}, so the checkpoint cannot load: {fix}")
