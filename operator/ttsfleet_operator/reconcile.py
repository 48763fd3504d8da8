"""One reconcile pass: render, apply what differs, delete what is stale, report.

Level-based and idempotent: it reads the live children, writes only those that
differ from the rendering, and writes the status only when it changed. A second
pass with nothing changed makes list requests only.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable

from pydantic import ValidationError

from ttsfleet_operator import conditions, drift, labels, tts_service
from ttsfleet_operator.cluster import ApiError, Cluster
from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.status import Problem, compute_status
from ttsfleet_operator.tts_service import TTSService

log = logging.getLogger(__name__)

# Every kind the operator may create, in apply order. Children of these kinds
# that carry the service's labels and our ownerReference but are no longer
# rendered get deleted.
CHILD_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
)


@dataclasses.dataclass
class Outcome:
    """What a pass did; `problem` set means the caller should retry later."""

    created: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    deleted: list[str] = dataclasses.field(default_factory=list)
    status_written: bool = False
    problem: Problem | None = None
    permanent: bool = False
    # Kind of the child whose apply or delete failed (the operator's error metric).
    failed_kind: str | None = None


def owner_reference(owner: dict) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned(manifest: dict, owner: dict) -> dict:
    """The manifest as applied: owner reference (garbage collection) and rendered hash."""
    manifest = {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": [owner_reference(owner)]}}
    return drift.with_rendered_hash(manifest)


def _key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _describe(obj: dict) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"


def _is_ours(obj: dict, owner_uid: str) -> bool:
    return any(
        ref.get("uid") == owner_uid and ref.get("controller") for ref in obj["metadata"].get("ownerReferences", [])
    )


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    def __init__(self, cluster: Cluster, now: Callable[[], str] = utc_now):
        self.cluster = cluster
        self.now = now

    async def reconcile(self, body: dict) -> Outcome:
        outcome = Outcome()
        name, namespace = body["metadata"]["name"], body["metadata"].get("namespace", "default")
        try:
            service = TTSService.model_validate(body)
        except ValidationError as error:
            # The API server's schema and CEL rules should have refused it; if not,
            # say so on the object rather than apply half of it.
            outcome.problem = Problem("InvalidSpec", str(error).replace("\n", " ")[:1000])
            outcome.permanent = True
            await self._report(body, None, [], outcome)
            return outcome

        live = await self._live_children(namespace, name, body["metadata"]["uid"])
        deployments: list[dict] = []
        for manifest in render_fleet(service):
            desired = owned(manifest, body)
            current = live.pop(_key(desired), None)
            result = current
            if drift.needs_apply(desired, current):
                try:
                    result = await self.cluster.apply(desired)
                except ApiError as error:
                    outcome.problem = Problem("ApplyFailed", f"{_describe(desired)}: {error.message}"[:1000])
                    outcome.failed_kind = desired["kind"]
                    break
                (outcome.updated if current else outcome.created).append(_describe(desired))
            if desired["kind"] == "Deployment":
                deployments.append(result)

        if outcome.problem is None:
            for stale in live.values():
                try:
                    await self.cluster.delete(
                        stale["apiVersion"],
                        stale["kind"],
                        namespace,
                        stale["metadata"]["name"],
                        stale["metadata"]["uid"],
                    )
                except ApiError as error:
                    outcome.problem = Problem("DeleteFailed", f"{_describe(stale)}: {error.message}"[:1000])
                    outcome.failed_kind = stale["kind"]
                    break
                outcome.deleted.append(_describe(stale))

        await self._report(body, service, deployments, outcome)
        if outcome.created or outcome.updated or outcome.deleted:
            log.info(
                "reconciled",
                extra={
                    "namespace": namespace,
                    "service": name,
                    # Not "created": LogRecord already has that attribute.
                    "children_created": outcome.created,
                    "children_updated": outcome.updated,
                    "children_deleted": outcome.deleted,
                },
            )
        return outcome

    async def _live_children(self, namespace: str, name: str, owner_uid: str) -> dict[tuple[str, str], dict]:
        selector = {labels.SERVICE: name, labels.MANAGED_BY: labels.MANAGER}
        children = {}
        for api_version, kind in CHILD_KINDS:
            for obj in await self.cluster.list(api_version, kind, namespace, selector):
                if _is_ours(obj, owner_uid):
                    obj.setdefault("apiVersion", api_version)
                    obj.setdefault("kind", kind)
                    children[_key(obj)] = obj
        return children

    async def _report(self, body: dict, service: TTSService | None, deployments: list[dict], outcome: Outcome) -> None:
        """Events for what changed, then the status if it differs."""
        for verb, items in (("Created", outcome.created), ("Updated", outcome.updated), ("Deleted", outcome.deleted)):
            for item in items:
                await self._event(body, "Normal", verb, f"{verb} {item}")
        if outcome.problem:
            await self._event(body, "Warning", outcome.problem.reason, outcome.problem.message)
            log.warning(
                "reconcile failed",
                extra={"service": body["metadata"]["name"], "reason": outcome.problem.reason},
            )

        previous = body.get("status") or {}
        if service is None:
            status = _invalid_spec_status(body, previous, outcome.problem, self.now())
        else:
            status = compute_status(service, previous, deployments, outcome.problem, self.now())
        if any(previous.get(key) != value for key, value in status.items()):
            try:
                await self.cluster.patch_status(
                    tts_service.API_VERSION,
                    tts_service.KIND,
                    body["metadata"].get("namespace", "default"),
                    body["metadata"]["name"],
                    status,
                )
                outcome.status_written = True
            except ApiError as error:
                log.warning("status write failed: %s", error)

    async def _event(self, body: dict, type_: str, reason: str, message: str) -> None:
        try:
            await self.cluster.emit_event(body, type_, reason, message)
        except ApiError as error:
            # An event is a courtesy; losing one must not fail the reconcile.
            log.warning("event not recorded: %s", error)


def _invalid_spec_status(body: dict, previous: dict, problem: Problem, now: str) -> dict:
    generation = body["metadata"].get("generation")
    old = previous.get("conditions")
    return {
        "observedGeneration": generation,
        "conditions": [
            conditions.condition(
                old, conditions.READY, conditions.FALSE, problem.reason, problem.message, generation, now
            ),
            conditions.condition(
                old, conditions.DEGRADED, conditions.TRUE, problem.reason, problem.message, generation, now
            ),
        ],
    }
