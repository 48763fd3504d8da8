"""`ttsfleet-runtime fetch`: fill a model cache volume once, for every pod that mounts it.

The operator's fill Job runs it (render/model_cache.py): it asks the hub which commit the
revision is and which files (sizes, LFS hashes) it holds, downloads them into the
volume's checkpoint directory, checks every file against the hub's list, and only then
writes the marker (ttsfleet_runtime.model_cache). A volume whose marker already names
the repository and revision is left as it is, so a re-run Job costs one hub request.
Failures a retry cannot fix exit with the codes the operator's podFailurePolicy knows.

No torch here: the hub client only (`huggingface_hub`, imported when a fill runs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    COMPILE_CACHE_DIR,
    FAILURE_BY_CODE,
    Marker,
    read_marker,
    write_marker,
)

log = logging.getLogger(__name__)

HASH_CHUNK_BYTES = 8 * 1024 * 1024


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def verify(checkpoint: Path, files: list[RemoteFile]) -> list[str]:
    """What differs between `checkpoint` and the hub's list of files: empty when nothing does."""
    problems = []
    for remote in files:
        local = checkpoint / remote.path
        if not local.is_file():
            problems.append(f"{remote.path}: missing")
        elif local.stat().st_size != remote.size:
            problems.append(f"{remote.path}: {local.stat().st_size} bytes, {remote.size} expected")
        elif remote.sha256 is not None and _sha256(local) != remote.sha256:
            problems.append(f"{remote.path}: sha256 differs")
        elif remote.git_blob_id is not None and _git_blob_id(local) != remote.git_blob_id:
            problems.append(f"{remote.path}: content differs")
    return problems


def fill(
    root: Path,
    repo: str,
    revision: str,
    hub: Hub,
    progress: Callable[[str], None] = log.info,
) -> Marker:
    """Fill the cache volume mounted at `root` with `repo` at `revision`; its marker."""
    marker = read_marker(root)
    commit, files = hub.describe(repo, revision)
    if marker is not None and marker.holds(repo, commit):
        progress(f"{root} holds {repo}@{commit} already")
        return marker
    checkpoint = root / CHECKPOINT_DIR
    checkpoint.mkdir(parents=True, exist_ok=True)
    total = sum(remote.size for remote in files)
    progress(f"downloading {repo}@{commit} ({len(files)} files, {total / 2**30:.2f} GiB)")
    hub.download(repo, commit, checkpoint)
    problems = verify(checkpoint, files)
    if problems:
        raise FetchError(5, "; ".join(problems[:5]))
    (root / COMPILE_CACHE_DIR).mkdir(exist_ok=True)
    marker = Marker(
        repo=repo,
        revision=revision,
        commit=commit,
        files={remote.path: remote.size for remote in files},
    )
    write_marker(root, marker)
    progress(f"{root} holds {repo}@{commit}: {len(files)} files verified")
    return marker
