"""Which events of a TTSService's watched children call for a pass over it.

Every child kind but the optional HTTPRoute is watched (`child_kinds.WATCHED`; the same
events keep the cache passes read them from, child_cache.py). A child that is gone asks
for a pass over its owner at once, whatever its kind: the pass re-creates it, without
waiting for the resync period.

The TTSService status (ready replicas, Ready / Progressing / Degraded, the model
cache's phase) is computed from its Deployments', fill Jobs' and claims' status
(`ChildKind.status_read`). Without watching them it follows pods becoming ready, or a
node taking them down, only at the next resync period. An event of those kinds asks
for a pass over its owner when a field `status.compute_status` reads has changed.
Metadata and spec are never compared: the operator's own patches to a child then ask
for no pass that would patch it again, so passes cannot feed themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

from ttsfleet_operator import child_kinds, tts_service
from ttsfleet_operator.resync import Key

# Kinds whose status the TTSService status reads.
STATUS_READ = frozenset(kind.kind for kind in child_kinds.ALL if kind.status_read)

STATUS_FIELDS = (
    # Deployments
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "updatedReplicas",
    "observedGeneration",
    # the model cache's fill Job and claim (model_cache.phase_of)
    "active",
    "ready",
    "phase",
)
# Timestamps move without anything the TTSService status shows having changed.
CONDITION_FIELDS = ("type", "status", "reason", "message")

DELETED = "DELETED"


def owner_key(child: Mapping) -> Key | None:
    """The TTSService that controls this child, as the resync loop keys it."""
    metadata = child["metadata"]
    for ref in metadata.get("ownerReferences") or []:
        group = (ref.get("apiVersion") or "").split("/")[0]
        if (
            ref.get("controller")
            and ref.get("kind") == tts_service.KIND
            and group == tts_service.GROUP
        ):
            return metadata.get("namespace", "default"), ref["name"]
    return None


def status_digest(child: Mapping) -> tuple:
    """What of a child's status the TTSService status depends on."""
    status = child.get("status") or {}
    conditions = frozenset(
        tuple(condition.get(field) for field in CONDITION_FIELDS)
        for condition in status.get("conditions") or []
    )
    # A claim being deleted (held by PVC protection) keeps its status: the deletion shows here.
    deleting = bool(child.get("metadata", {}).get("deletionTimestamp"))
    return (*(status.get(field) for field in STATUS_FIELDS), conditions, deleting)


class ChildWatch:
    """Remembers each child's last status digest, to tell a change that matters from one that does not."""

    def __init__(self) -> None:
        self.digests: dict[str, tuple] = {}  # child uid -> status digest

    def owner_to_refresh(self, event_type: str | None, child: Mapping) -> Key | None:
        """The owner to pass over for this watch event, or None when nothing it shows changed.

        A child not seen before counts as changed: at start, the TTSService's pass may
        have read it before this watch listed it (pods ready in between would go
        unreported until the period). Listings after a watch reconnects (type None)
        are compared like any other event. Of the kinds whose status nothing reads,
        only a deletion counts.
        """
        uid = child["metadata"].get("uid", "")
        owner = owner_key(child)
        if event_type == DELETED:
            self.digests.pop(uid, None)
            return owner
        if child.get("kind") not in STATUS_READ:
            return None
        digest = status_digest(child)
        previous = self.digests.get(uid)
        self.digests[uid] = digest
        return None if previous == digest else owner
