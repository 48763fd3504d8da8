"""The operator's own list-then-watch of its child kinds, in place of kopf's watches of them.

Why not kopf's: kopf runs every watch event through its handler machinery (a queue and a
worker per object, body wrappers, a handler lookup, an invocation context), and queues each
object whole, managedFields and all, while its worker is behind. The only consumer of a
child's event is a plain function that keeps the object (child_cache.py) and compares a
status digest (child_watch.py): at 1,000 TTSServices kopf's processing of those events was
a quarter of the operator's CPU in a bulk create (py-spy, docs/operator-scale.md). Here an
event is decoded once, its managedFields dropped, and handed to that function directly.

The protocol is the API server's (what an informer's reflector does): list (events of type
None, as kopf reported a listing), then watch from the list's resourceVersion with
bookmarks, resuming from the last version seen when the server ends a stream; a version
too old to resume from (410 Gone) lists again. Any other failure lists again after a
pause that doubles up to `MAX_BACKOFF_SECONDS`. A listing reports no deletions it missed:
the cache's own periodic listing catches those (child_cache.RELIST_SECONDS).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from ttsfleet_operator.child_kinds import ChildKind
from ttsfleet_operator.cluster import ApiError

log = logging.getLogger(__name__)

# Told of every event: (type: ADDED, MODIFIED, DELETED or None while listing, object).
Handler = Callable[[str | None, dict], None]

WATCH_TIMEOUT_SECONDS = 300
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
GONE = 410


class ResourceVersionGone(Exception):
    """The watch's resourceVersion is older than the API server keeps: list again."""


def _kept(obj: dict, kind: ChildKind) -> dict:
    # A listing's items carry no kind; nothing reads managedFields (most of an object's size).
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class ListWatch:
    """One kind, in one namespace or all (None), objects matching `selector`."""

    def __init__(
        self,
        cluster,
        kind: ChildKind,
        namespace: str | None,
        selector: str,
        handle: Handler,
        sleep: Callable[[float], object] = asyncio.sleep,
    ):
        self.cluster = cluster  # KubeCluster: list_and_version, watch
        self.kind = kind
        self.namespace = namespace
        self.selector = selector
        self.handle = handle
        self.sleep = sleep

    async def run(self) -> None:
        backoff = FIRST_BACKOFF_SECONDS
        while True:
            try:
                version = await self._list()
                backoff = FIRST_BACKOFF_SECONDS
                while True:
                    version = await self._watch(version)
            except ResourceVersionGone:
                continue  # list again at once
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - a watch must outlive any failure
                log.warning(
                    "child watch failed; listing again",
                    extra={"kind": self.kind.kind, "error": str(error), "retry_s": backoff},
                )
                await self.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _list(self) -> str:
        items, version = await self.cluster.list_and_version(
            self.kind.api_version, self.kind.kind, self.namespace, self.selector
        )
        for item in items:
            self.handle(None, _kept(item, self.kind))
        return version

    async def _watch(self, version: str) -> str:
        """Events until the server ends the stream; the version to resume from."""
        events = self.cluster.watch(
            self.kind.api_version,
            self.kind.kind,
            self.namespace,
            self.selector,
            version,
            WATCH_TIMEOUT_SECONDS,
        )
        try:
            return await self._follow(events, version)
        except ApiError as error:
            if error.status == GONE:
                raise ResourceVersionGone(error.message) from error
            raise

    async def _follow(self, events, version: str) -> str:
        async for event in events:
            type_, obj = event.get("type"), event.get("object") or {}
            if type_ == "ERROR":
                if obj.get("code") == GONE:
                    raise ResourceVersionGone(obj.get("message", ""))
                raise ApiError(obj.get("code") or 500, obj.get("message", ""))
            version = _version(obj) or version
            if type_ != "BOOKMARK":
                self.handle(type_, _kept(obj, self.kind))
        return version


def _version(obj: Mapping) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")
