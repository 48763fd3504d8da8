"""The seam between reconcile logic and the Kubernetes API.

`reconcile` talks to a `Cluster`; production uses `KubeCluster`
(kube_cluster.py, kubernetes-asyncio), tests use an in-memory fake. Every
method is one API request, so counting calls counts requests.
"""

from __future__ import annotations

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
    new, old = resource_version(candidate), resource_version(current)
    return new is None or old is None or new >= old


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
