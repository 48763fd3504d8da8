"""The seam between reconcile logic and the Kubernetes API.

`reconcile` talks to a `Cluster`; production uses `KubeCluster`
(kube_cluster.py, kubernetes-asyncio), tests use an in-memory fake. Every
method is one API request, so counting calls counts requests.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Protocol

FIELD_MANAGER = "ttsfleet-operator"


def resource_version(obj: Mapping) -> int | None:
    """The resourceVersion as a number; None where there is none that is one.

    The API documents it as opaque; every API server stores etcd's revision there, and
    informers compare it too: we do so only to keep the newer of two copies of one object."""
    try:
        return int(obj.get("metadata", {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def is_newer(candidate: Mapping, current: Mapping | None) -> bool:
    """`candidate` should replace `current`: there is none, or it is not older."""
    if current is None:
        return True
    return not_older(resource_version(candidate), resource_version(current))


def not_older(new: int | None, old: int | None) -> bool:
    """Of two resourceVersions (`resource_version`), `new` may replace `old`."""
    return new is None or old is None or new >= old


class Kept:
    """An API object kept between passes, as its JSON text, and the few fields read without it.

    Thousands live as long as the process (every child, every TTSService's newest body).
    As trees of dicts (12 KB of small objects a child) they sat in pymalloc's arenas
    between the watch bodies allocated and freed around them, and an arena holding one
    live block is never given back: at 1,000 TTSServices 160 MB were live and 161 MB free
    inside the arenas, for good. One string each lives outside them, and `load` gives
    every reader a copy of its own, as a deep copy did."""

    __slots__ = ("deleting", "encoded", "labels", "name", "uid", "version")

    def __init__(self, obj: Mapping):
        metadata = obj.get("metadata") or {}
        self.name: str = metadata.get("name", "")
        self.uid: str | None = metadata.get("uid")
        self.version = resource_version(obj)
        # Interned: every child carries the same label keys, and a service's children its name.
        self.labels: dict[str, str] = {
            sys.intern(key): sys.intern(value)
            for key, value in (metadata.get("labels") or {}).items()
        }
        self.deleting = bool(metadata.get("deletionTimestamp"))
        self.encoded = json.dumps(obj, separators=(",", ":"))

    def load(self) -> dict:
        return json.loads(self.encoded)


class ApiError(Exception):
    """A request the API server refused (status code and its message)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Cluster(Protocol):
    async def list(
        self, api_version: str, kind: str, namespace: str, selector: dict[str, str]
    ) -> list[dict]:
        """Objects of a kind in a namespace matching every label in `selector`."""

    async def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves this kind (discovery; e.g. Gateway API's HTTPRoute)."""

    async def create(self, manifest: dict) -> dict:
        """Create the object; an ApiError with status 409 if it exists already (it is left as it is)."""

    async def apply(self, manifest: dict, live: dict | None = None) -> dict:
        """Server-side apply with our field manager, forcing conflicts; returns the stored object.

        `live` is the object as last listed, if it exists: when the apply is refused as
        invalid, the rendered fields replace its fields once (see KubeCluster.apply)."""

    async def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str
    ) -> None:
        """Delete if the object still has `uid` (never a newer namesake); a missing object is fine."""

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict
    ) -> dict:
        """JSON merge patch of the status subresource."""

    async def emit_event(self, owner: dict, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event about `owner` (Normal or Warning)."""
