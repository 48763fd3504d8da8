"""`ttsfleet-runtime fetch`: fill a model cache volume once, for every pod that mounts it.

The operator's fill Job runs it (render/model_cache.py): it refuses a repository id or
revision the hub could not hold, asks the hub which commit the revision is and which
files (sizes, LFS hashes) it holds, downloads them into a fresh folder of the volume,
checks every file against the hub's list there, and only then links the checkpoint to
that folder and writes the marker (the layout: ttsfleet_runtime.model_cache). Every file
operation in the volume is relative to a directory descriptor with O_NOFOLLOW, so a link
planted in the volume fails the fill instead of redirecting its writes. A volume whose
marker names the same commit, with its files intact, is left as it is, so a re-run Job
costs one hub request and a read of each file's ends. Failures a retry cannot fix exit
with the codes the operator's podFailurePolicy knows.

No torch here: the hub client only (`huggingface_hub`, imported when a fill runs).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    COMPILE_CACHE_DIR,
    FAILURE_BY_CODE,
    FILLS_DIR,
    HASH_CHUNK_BYTES,
    MARKER_FILE,
    CacheError,
    Marker,
    VerifiedFile,
    check_cache,
    is_relative_file_path,
    open_directory,
    open_inside,
    reference_problem,
    sample_sha256,
    write_marker,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """One file of a hub revision as the hub describes it."""

    path: str
    size: int
    # sha256 of the content for LFS files (the weights); git's blob id for the others.
    sha256: str | None = None
    git_blob_id: str | None = None


class FetchError(Exception):
    """A failure a retry cannot fix; `exit_code` is one of model_cache.PERMANENT_FAILURES'."""

    def __init__(self, exit_code: int, detail: str):
        failure = FAILURE_BY_CODE[exit_code]
        super().__init__(f"{failure.reason}: {detail}")
        self.exit_code = exit_code


class Hub(Protocol):
    def describe(self, repo: str, revision: str) -> tuple[str, list[RemoteFile]]:
        """(commit the revision resolves to, the files it holds); FetchError when refused."""

    def download(self, repo: str, commit: str, into: Path) -> None:
        """Every file of `commit` into `into` (resuming what is there)."""


class HuggingFaceHub:
    """The Hugging Face hub (or a mirror: `endpoint`, else HF_ENDPOINT), with an optional token."""

    def __init__(self, token: str | None = None, endpoint: str | None = None):
        self.token = token or None
        self.endpoint = endpoint

    def describe(self, repo: str, revision: str) -> tuple[str, list[RemoteFile]]:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        try:
            info = HfApi(endpoint=self.endpoint, token=self.token).model_info(
                repo, revision=revision, files_metadata=True
            )
        except GatedRepoError as error:
            raise FetchError(3, f"{repo} is gated: {error}") from None
        except RevisionNotFoundError:
            raise FetchError(4, f"{repo} has no revision {revision!r}") from None
        except RepositoryNotFoundError:
            # The hub answers 401 for a private repository and a missing one alike.
            raise FetchError(
                4, f"no repository {repo} (or it is private and needs a token)"
            ) from None
        except HfHubHTTPError as error:
            status = getattr(error.response, "status_code", None)
            if status in (401, 403):
                raise FetchError(3, f"{repo}: the hub answered {status}") from None
            raise
        files = [
            RemoteFile(
                path=sibling.rfilename,
                size=sibling.lfs.size if sibling.lfs else (sibling.size or 0),
                sha256=sibling.lfs.sha256 if sibling.lfs else None,
                git_blob_id=None if sibling.lfs else sibling.blob_id,
            )
            for sibling in info.siblings or []
        ]
        return info.sha, files

    def download(self, repo: str, commit: str, into: Path) -> None:
        from huggingface_hub import snapshot_download

        snapshot_download(
            repo, revision=commit, local_dir=into, token=self.token, endpoint=self.endpoint
        )


def _digests(fd: int, size: int, git_blob_id: bool) -> tuple[str, str | None]:
    """(sha256, git blob id when asked) of the open file `fd` of `size` bytes, in one pass."""
    sha256 = hashlib.sha256()
    blob = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False) if git_blob_id else None
    offset = 0
    while chunk := os.pread(fd, HASH_CHUNK_BYTES, offset):
        sha256.update(chunk)
        if blob is not None:
            blob.update(chunk)
        offset += len(chunk)
    return sha256.hexdigest(), blob.hexdigest() if blob is not None else None


def _links_under(dir_fd: int) -> list[str]:
    """Every symbolic link under the directory `dir_fd` (relative paths)."""
    links = []
    for parent, dirnames, filenames, parent_fd in os.fwalk(dir_fd=dir_fd):
        for name in dirnames + filenames:
            if stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode):
                links.append(os.path.normpath(os.path.join(parent, name)))
    return links


def verify(fill_fd: int, files: list[RemoteFile]) -> tuple[dict[str, VerifiedFile], list[str]]:
    """Each of the hub's files as found under `fill_fd` (size, sha256, sample) when it
    matches the hub's list, and what differs (empty when nothing does)."""
    verified, problems = {}, []
    for remote in files:
        try:
            fd = open_inside(fill_fd, remote.path)
        except FileNotFoundError:
            problems.append(f"{remote.path}: missing")
            continue
        try:
            status = os.fstat(fd)
            size = status.st_size
            if not stat.S_ISREG(status.st_mode):
                problems.append(f"{remote.path}: not a regular file")
            elif size != remote.size:
                problems.append(f"{remote.path}: {size} bytes, {remote.size} expected")
            else:
                sha256, git_blob_id = _digests(fd, size, remote.git_blob_id is not None)
                if remote.sha256 is not None and sha256 != remote.sha256:
                    problems.append(f"{remote.path}: sha256 differs")
                elif remote.git_blob_id is not None and git_blob_id != remote.git_blob_id:
                    problems.append(f"{remote.path}: content differs")
                else:
                    # On disk before the marker vouches for it (a crash loses no verified byte).
                    os.fsync(fd)
                    verified[remote.path] = VerifiedFile(size, sha256, sample_sha256(fd, size))
        finally:
            os.close(fd)
    return verified, problems


def _holds_the_hubs_files(marker: Marker, files: list[RemoteFile]) -> bool:
    if set(marker.files) != {remote.path for remote in files}:
        return False
    return all(
        marker.files[remote.path].size == remote.size
        and remote.sha256 in (None, marker.files[remote.path].sha256)
        for remote in files
    )


def _own_directory(root: Path, root_fd: int, name: str, mode: int = 0o755) -> int:
    """The directory `name` of the volume (made when missing); FetchError 7 when something
    else, a planted link above all, stands there."""
    try:
        os.mkdir(name, mode, dir_fd=root_fd)
    except FileExistsError:
        pass
    try:
        return open_directory(name, root_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise FetchError(
                7,
                f"{root / name} is a symbolic link or not a directory: remove it (the fill "
                "makes it) and fill again",
            ) from None
        raise


def _remove(dir_fd: int, name: str) -> None:
    """`name` under `dir_fd`, a tree included; links are removed, never followed."""
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _remove_leftovers(root_fd: int, fills_fd: int, keep: str | None) -> list[str]:
    """What earlier fills left (folders of failed or interrupted fills, temporary links and
    markers), except the folder `keep` that the volume's marker vouches for."""
    removed = []
    for name in os.listdir(fills_fd):
        if name != keep:
            _remove(fills_fd, name)
            removed.append(f"{FILLS_DIR}/{name}")
    for name in os.listdir(root_fd):
        if name.startswith((f".{MARKER_FILE}.", f".{CHECKPOINT_DIR}.")) and name.endswith(".tmp"):
            _remove(root_fd, name)
            removed.append(name)
    return removed


def _switch(root_fd: int, fills_fd: int, marker: Marker) -> str | None:
    """Point CHECKPOINT_DIR at the marker's folder in one rename; the name (under
    FILLS_DIR) of what an older fetch left in its place, a folder, to be removed."""
    set_aside = None
    try:
        found = os.stat(CHECKPOINT_DIR, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    if found is not None and not stat.S_ISLNK(found.st_mode):
        # An older fetch filled CHECKPOINT_DIR in place, and a link cannot replace a
        # directory: set it aside. Its marker (sizes only) reads as not filled already.
        set_aside = f"older-{secrets.token_hex(4)}"
        os.rename(CHECKPOINT_DIR, set_aside, src_dir_fd=root_fd, dst_dir_fd=fills_fd)
    link = f".{CHECKPOINT_DIR}.{secrets.token_hex(8)}.tmp"
    os.symlink(marker.link_target(), link, dir_fd=root_fd)
    os.replace(link, CHECKPOINT_DIR, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    os.fsync(root_fd)
    return set_aside


def _fill_name(commit: str) -> str:
    """A fresh folder name under FILLS_DIR: the commit's start (for people) and a nonce."""
    return f"{re.sub('[^A-Za-z0-9]', '', commit)[:12] or 'fill'}-{secrets.token_hex(4)}"


def _still_good(root: Path, full: bool, progress: Callable[[str], None]) -> Marker | None:
    """The volume's marker when every file it vouches for is intact, else None."""
    try:
        return check_cache(root, full)
    except CacheError as error:
        if os.path.lexists(root / MARKER_FILE):
            progress(f"{root} is filled again: {error}")
        return None


def fill(
    root: Path,
    repo: str,
    revision: str,
    hub: Hub,
    progress: Callable[[str], None] = log.info,
    full_check: bool = False,
) -> Marker:
    """Fill the cache volume mounted at `root` with `repo` at `revision`; its marker.

    A volume that holds that commit already, its files intact (sizes and samples, or
    every byte with `full_check`), is left as it is. Otherwise the files go into a fresh
    folder, are verified there, and only then become CHECKPOINT_DIR and get their marker:
    a fill that fails or dies on the way leaves the previous fill as it was."""
    problem = reference_problem(repo, revision)
    if problem is not None:
        raise FetchError(6, problem)
    commit, files = hub.describe(repo, revision)
    if reference_problem(repo, commit) is not None:
        raise FetchError(5, f"the hub resolved {revision!r} to {commit!r}, not a commit")
    outside = [remote.path for remote in files if not is_relative_file_path(remote.path)]
    if outside:
        raise FetchError(5, f"the hub lists {outside[0]!r}, not a path inside a checkpoint")
    root.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        good = _still_good(root, full_check, progress)
        if good is not None and good.holds(repo, commit) and _holds_the_hubs_files(good, files):
            progress(f"{root} holds {repo}@{commit} already")
            return good
        # Mode as a plain mkdir makes it (the umask decides): the pods write it.
        os.close(_own_directory(root, root_fd, COMPILE_CACHE_DIR, mode=0o777))
        fills_fd = _own_directory(root, root_fd, FILLS_DIR)
        try:
            for name in _remove_leftovers(root_fd, fills_fd, good.directory if good else None):
                progress(f"removed {root / name}, left by an earlier fill")
            marker = _download_and_verify(
                root, fills_fd, repo, revision, commit, files, hub, progress
            )
            set_aside = _switch(root_fd, fills_fd, marker)
            write_marker(root_fd, marker)
            # The previous fill is no longer linked; pods still reading it keep their open files.
            for name in (set_aside, good.directory if good else None):
                if name is not None and name != marker.directory:
                    _remove(fills_fd, name)
        finally:
            os.close(fills_fd)
    finally:
        os.close(root_fd)
    progress(f"{root} holds {repo}@{commit}: {len(files)} files verified")
    return marker


def _download_and_verify(
    root: Path,
    fills_fd: int,
    repo: str,
    revision: str,
    commit: str,
    files: list[RemoteFile],
    hub: Hub,
    progress: Callable[[str], None],
) -> Marker:
    name = _fill_name(commit)
    # Private while it fills: no other user can plant anything in it.
    os.mkdir(name, 0o700, dir_fd=fills_fd)
    try:
        total = sum(remote.size for remote in files)
        progress(f"downloading {repo}@{commit} ({len(files)} files, {total / 2**30:.2f} GiB)")
        hub.download(repo, commit, root / FILLS_DIR / name)
        fill_fd = open_directory(name, fills_fd)
        try:
            links = _links_under(fill_fd)
            if links:
                raise FetchError(
                    7,
                    f"{root / FILLS_DIR / name / links[0]} is a symbolic link, which no "
                    "download makes: find who writes the volume, then fill again",
                )
            verified, problems = verify(fill_fd, files)
            if problems:
                raise FetchError(5, "; ".join(problems[:5]))
            os.fchmod(fill_fd, 0o755)
        finally:
            os.close(fill_fd)
    except BaseException:
        _remove(fills_fd, name)  # tidy now; a fill killed here leaves it to the next one
        raise
    return Marker(repo=repo, revision=revision, commit=commit, directory=name, files=verified)
