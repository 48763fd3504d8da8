"""A `Cluster` whose children lists come from memory, kept current by watches.

A pass reads its TTSService's children (child_kinds.ALL) on every run: listing them from
the API server costs one request per kind per pass, 8 requests for each of 1,000
services every period. `CachedCluster` wraps the real `Cluster` and answers `list` for the
watched kinds from an index by (namespace, kind, service label), the way an informer's
indexer answers a controller:

- the watches (kopf's, handlers.py) hand every event to `observe`;
- the first `list` of a kind in a namespace lists it once from the API server (the
  managed-by label only: every service's children at once) and keeps the result;
- every `relist_seconds` that listing is made again and replaces what it covers: a watch
  that reconnects after a gap does not report the deletions it missed, a new listing does;
- what `apply` returns is kept at once: the next pass must not see the object from before
  its own write (it would apply again). Deletes are not: the object may live on with a
  deletionTimestamp (a claim held by PVC protection) until its watch event says it is gone.

Of two versions of an object the one with the greater resourceVersion stands, so an event
that arrives after the write it reports, or a listing that began before a watch event,
never steps an object back. Everything else (apply, create, delete, status, Events,
discovery) goes to the wrapped `Cluster` unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping

from ttsfleet_operator import child_kinds, labels
from ttsfleet_operator.cluster import Cluster, Kept, not_older, resource_version

Slot = tuple[str, str]  # (namespace, kind)

# A listing older than this is made again at the next `list` (see the module docstring).
RELIST_SECONDS = 600.0
# uids of objects whose deletion a watch reported, kept so that a listing begun before the
# deletion does not bring them back; far more than are deleted within one listing.
TOMBSTONES_KEPT = 10_000

DELETED = "DELETED"


def _trimmed(obj: Mapping, kind: str, api_version: str) -> Kept:
    """The object as kept: no managedFields (nothing reads them; they are most of its
    size), encoded (`Kept`: `list` hands out copies)."""
    trimmed = {**obj, "metadata": dict(obj.get("metadata") or {})}
    trimmed["metadata"].pop("managedFields", None)
    trimmed.setdefault("apiVersion", api_version)
    trimmed.setdefault("kind", kind)
    return Kept(trimmed)


class CachedCluster:
    """`Cluster` with `list` answered from memory for `child_kinds.CACHED` (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        relist_seconds: float = RELIST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.cluster = cluster
        self.relist_seconds = relist_seconds
        self.clock = clock
        self.kinds = {kind.kind: kind for kind in child_kinds.CACHED}
        # (namespace, kind) -> name -> object
        self.objects: dict[Slot, dict[str, Kept]] = collections.defaultdict(dict)
        # (namespace, kind, service label) -> names: what one pass lists
        self.by_service: dict[tuple[str, str, str], set[str]] = collections.defaultdict(set)
        # (namespace, kind) -> clock time of its last listing
        self.listed: dict[Slot, float] = {}
        self.listing: dict[Slot, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self.tombstones: collections.OrderedDict[str, None] = collections.OrderedDict()

    # -- what the watches report ------------------------------------------------------------

    def observe(self, event_type: str | None, obj: Mapping) -> None:
        """A watch event (kopf's raw type: ADDED, MODIFIED, DELETED, None while listing)."""
        kind = self.kinds.get(obj.get("kind", ""))
        if kind is None:
            return
        namespace = obj["metadata"].get("namespace", "default")
        if event_type == DELETED:
            uid = obj["metadata"].get("uid")
            if uid:
                self.tombstones[uid] = None
                while len(self.tombstones) > TOMBSTONES_KEPT:
                    self.tombstones.popitem(last=False)
            current = self.objects[(namespace, kind.kind)].get(obj["metadata"]["name"])
            if current is not None and current.uid == uid:
                self._remove(namespace, kind.kind, obj["metadata"]["name"])
            return
        self._store(namespace, kind.kind, _trimmed(obj, kind.kind, kind.api_version))

    # -- the Cluster protocol ---------------------------------------------------------------

    async def list(
        self, api_version: str, kind: str, namespace: str, selector: dict[str, str]
    ) -> list[dict]:
        if kind not in self.kinds:
            return await self.cluster.list(api_version, kind, namespace, selector)
        slot = (namespace, kind)
        listed = self.listed.get(slot)
        if listed is None or self.clock() - listed >= self.relist_seconds:
            await self._relist(slot, api_version)
        service = selector.get(labels.SERVICE)
        names = (
            self.by_service.get((namespace, kind, service), ())
            if service is not None
            else self.objects.get(slot, {})
        )
        found = []
        for name in sorted(names):
            kept = self.objects[slot][name]
            if all(kept.labels.get(key) == value for key, value in selector.items()):
                found.append(kept.load())
        return found

    async def serves(self, api_version: str, kind: str) -> bool:
        return await self.cluster.serves(api_version, kind)

    async def create(self, manifest: dict) -> dict:
        return await self.cluster.create(manifest)

    async def apply(self, manifest: dict, live: dict | None = None) -> dict:
        result = await self.cluster.apply(manifest, live)
        kind = self.kinds.get(manifest["kind"])
        if kind is not None and isinstance(result, dict) and result.get("metadata"):
            namespace = result["metadata"].get("namespace", manifest["metadata"]["namespace"])
            self._store(namespace, kind.kind, _trimmed(result, kind.kind, kind.api_version))
        return result

    async def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str
    ) -> None:
        await self.cluster.delete(api_version, kind, namespace, name, uid)

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict
    ) -> dict:
        return await self.cluster.patch_status(api_version, kind, namespace, name, status)

    async def emit_event(self, owner: dict, type_: str, reason: str, message: str) -> None:
        await self.cluster.emit_event(owner, type_, reason, message)

    # -- keeping the index ------------------------------------------------------------------

    async def _relist(self, slot: Slot, api_version: str) -> None:
        """List every managed child of a kind in a namespace and take it as the truth, but for
        what watches reported since (newer versions, deletions)."""
        async with self.listing[slot]:
            listed = self.listed.get(slot)
            if listed is not None and self.clock() - listed < self.relist_seconds:
                return  # another pass listed it while this one waited
            started = self.clock()
            namespace, kind = slot
            items = await self.cluster.list(
                api_version, kind, namespace, {labels.MANAGED_BY: labels.MANAGER}
            )
            newest = max((resource_version(item) or 0 for item in items), default=0)
            present = {item["metadata"]["name"] for item in items}
            # Gone from the listing and not newer than anything in it: deleted while no
            # watch reported it. (A newer one was created after the listing was taken.)
            for name, kept in list(self.objects.get(slot, {}).items()):
                if name not in present and (kept.version or 0) <= newest:
                    self._remove(namespace, kind, name)
            for item in items:
                if item["metadata"].get("uid") not in self.tombstones:
                    self._store(namespace, kind, _trimmed(item, kind, api_version))
            self.listed[slot] = started

    def _store(self, namespace: str, kind: str, kept: Kept) -> None:
        slot = (namespace, kind)
        current = self.objects[slot].get(kept.name)
        if current is not None and not not_older(kept.version, current.version):
            return
        if current is not None:
            self._unindex(namespace, kind, current)
        self.objects[slot][kept.name] = kept
        service = kept.labels.get(labels.SERVICE)
        if service is not None:
            self.by_service[(namespace, kind, service)].add(kept.name)

    def _remove(self, namespace: str, kind: str, name: str) -> None:
        kept = self.objects[(namespace, kind)].pop(name, None)
        if kept is not None:
            self._unindex(namespace, kind, kept)

    def _unindex(self, namespace: str, kind: str, kept: Kept) -> None:
        key = (namespace, kind, kept.labels.get(labels.SERVICE))
        names = self.by_service.get(key)
        if names is not None:
            names.discard(kept.name)
            if not names:
                del self.by_service[key]
