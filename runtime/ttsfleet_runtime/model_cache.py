"""The model cache volume's layout and the fill's exit codes: the contract between the
operator, which renders the volume, the fill Job and the pods that mount it, and
`ttsfleet-runtime fetch` (checkpoint/fetch.py), which fills it.

A filled cache volume holds the checkpoint in `CHECKPOINT_DIR`, the empty directory
`COMPILE_CACHE_DIR` and, written last and only after every file was verified, the
marker `MARKER_FILE` naming the repository, the revision asked for and the commit it
resolved to. No marker: not filled.

A fill that cannot succeed by retrying exits with one of `PERMANENT_FAILURES`' codes;
the operator turns each into a `podFailurePolicy` rule that fails the Job at once, and
reads the rule's index back from the Job's Failed condition as the cache's reason. Any
other non-zero exit (the network, the hub's 5xx) is retried by the Job's backoff.

Standard library only: the operator imports it (see the import-linter contracts).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

CHECKPOINT_DIR = "checkpoint"
# The one part of the volume the pods write: their compiled kernels (`--compile-cache-dir`,
# keyed inside by versions and GPU model), so a new pod loads what an earlier one compiled.
# The fill makes it, so it belongs to the pods' user: a directory the kubelet makes for a
# subPath mount would belong to root.
COMPILE_CACHE_DIR = "compile-cache"
MARKER_FILE = "ttsfleet-model.json"


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
)
FAILURE_BY_CODE = {failure.exit_code: failure for failure in PERMANENT_FAILURES}


@dataclasses.dataclass(frozen=True)
class Marker:
    """What a filled cache holds: `repo` at `revision` (as asked), resolved to `commit`."""

    repo: str
    revision: str
    commit: str
    # Relative path -> size in bytes, of every file verified.
    files: dict[str, int]

    def holds(self, repo: str, revision: str) -> bool:
        return self.repo == repo and revision in (self.revision, self.commit)


def read_marker(root: Path) -> Marker | None:
    """The marker of a cache volume mounted at `root`, or None when it was never filled."""
    try:
        data = json.loads((root / MARKER_FILE).read_text())
        return Marker(
            repo=data["repo"],
            revision=data["revision"],
            commit=data["commit"],
            files={str(k): int(v) for k, v in data["files"].items()},
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_marker(root: Path, marker: Marker) -> None:
    """Atomically: a reader sees no marker or the whole one, never half of it."""
    staging = root / f".{MARKER_FILE}.tmp"
    staging.write_text(json.dumps(dataclasses.asdict(marker), indent=2, sort_keys=True) + "\n")
    os.replace(staging, root / MARKER_FILE)
