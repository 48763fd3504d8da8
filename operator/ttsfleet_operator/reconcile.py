"""One reconcile pass: render, apply what differs, delete what is stale, report.

Level-based and idempotent: it reads the live children, writes only those that
differ from the rendering, and writes the status only when it changed. A second
pass with nothing changed sends no request (child lists come from watches, child_cache.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable

from pydantic import ValidationError

from ttsfleet_operator import child_kinds, conditions, drift, labels, model_cache, tts_service
from ttsfleet_operator.canary import state_machine
from ttsfleet_operator.canary.plan import plan
from ttsfleet_operator.canary.tracks import candidate_revision
from ttsfleet_operator.cluster import ApiError, Cluster
from ttsfleet_operator.render import api_keys, render_fleet
from ttsfleet_operator.render.fleet import Tracks
from ttsfleet_operator.replicas import on_demand_floor
from ttsfleet_operator.status import Problem, compute_status
from ttsfleet_operator.tts_service import (
    AnalysisResult,
    CanaryStatus,
    ModelCacheStatus,
    TTSService,
)

# Runs one canary analysis for a service (canary/analysis.py over Prometheus in production).
Analyse = Callable[[TTSService], Awaitable[AnalysisResult]]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Outcome:
    """What a pass did and what it rendered; `problem` set means the caller should retry later.

    The operator's metrics read the fleet from here (metrics.py): what this pass
    rendered from the canary state it stepped to, never a second rendering of the body.
    """

    created: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    deleted: list[str] = dataclasses.field(default_factory=list)
    status_written: bool = False
    # The TTSService as the status write returned it: newer than the body this pass began from.
    written: dict | None = None
    problem: Problem | None = None
    permanent: bool = False
    # Kind of the child whose apply or delete failed (the operator's error metric).
    failed_kind: str | None = None
    # Every child this pass rendered, in apply order: what the operator keeps in place
    # (also when one apply failed). None when the pass applied nothing: an invalid spec,
    # or the API keys Secret its pods mount could not be created.
    rendered: list[dict] | None = None
    # Ready on-demand pods the service should never go below (replicas.on_demand_floor).
    on_demand_floor: int | None = None
    # The canary phase after this pass (state_machine); None for a service that has no
    # canary and never had one.
    canary_phase: str | None = None


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
    manifest = {
        **manifest,
        "metadata": {**manifest["metadata"], "ownerReferences": [owner_reference(owner)]},
    }
    return drift.with_rendered_hash(manifest)


def _key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _describe(obj: dict) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"


def _is_ours(obj: dict, owner_uid: str) -> bool:
    return any(
        ref.get("uid") == owner_uid and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences", [])
    )


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _no_analysis(service: TTSService) -> AnalysisResult:
    return AnalysisResult(
        result=state_machine.INCONCLUSIVE, reason="no Prometheus configured (--prometheus-url)"
    )


def _stable_serves(
    live: dict[tuple[str, str], dict], service_name: str, revision: str | None
) -> bool:
    """Every stable Deployment runs `revision`, rolled out and ready."""
    stable = [
        obj
        for (kind, _), obj in live.items()
        if kind == "Deployment"
        and obj["metadata"].get("labels", {}).get(labels.TRACK) == labels.STABLE
    ]
    if revision is None or not stable:
        return False
    for deployment in stable:
        status, spec = deployment.get("status") or {}, deployment.get("spec") or {}
        wanted = spec.get("replicas", 0) or 0
        if (deployment["metadata"].get("annotations") or {}).get(labels.REVISION) != revision:
            return False
        if (status.get("observedGeneration") or 0) < deployment["metadata"].get("generation", 0):
            return False
        if (status.get("updatedReplicas") or 0) < wanted or (
            status.get("readyReplicas") or 0
        ) < wanted:
            return False
        if (status.get("replicas") or 0) > wanted:  # old pods still terminating
            return False
    return True


# Owners whose generated API keys Secret is known to exist, remembered at most: past
# it the oldest is forgotten and costs one create answered 409 on its next pass.
KNOWN_API_KEYS_SECRETS_MAX = 10_000
# Owners known to have no child of an unwatched kind (HTTPRoute), remembered at most: past
# it the oldest is forgotten and costs one list on its next pass.
KNOWN_WITHOUT_UNWATCHED_MAX = 10_000


class Reconciler:
    def __init__(
        self,
        cluster: Cluster,
        now: Callable[[], str] = utc_now,
        analyse: Analyse = _no_analysis,
    ):
        self.cluster = cluster
        self.now = now
        self.analyse = analyse
        # Owner uids whose API keys Secret exists (created, or 409 on create), in the
        # order learnt. The operator may not read Secrets (RBAC `get` would be every
        # Secret's data), so this is how an idle pass knows to send nothing; a restart
        # starts it empty and the first pass of each service gets one 409.
        self._api_keys_secret_exists: dict[str, None] = {}
        # Owner uids that have no child of a kind no watch keeps (child_kinds: HTTPRoute),
        # as their last pass left them. Only this operator makes such children (they carry
        # the owner's uid), so until a pass renders one there is nothing to list: an idle
        # pass sends no request. A restart starts it empty: each service's first pass lists.
        self._without_unwatched: dict[str, None] = {}

    def forget(self, owner_uid: str) -> None:
        """A TTSService is gone: its Secret goes with it (garbage collection)."""
        self._api_keys_secret_exists.pop(owner_uid, None)
        self._without_unwatched.pop(owner_uid, None)

    async def reconcile(self, body: dict) -> Outcome:
        outcome = Outcome()
        name, namespace = body["metadata"]["name"], body["metadata"].get("namespace", "default")
        try:
            service = TTSService.model_validate(body)
        except ValidationError as error:
            # The API server's schema and CEL rules should have refused it; if not,
            # say so on the object rather than apply half of it.
            outcome.problem = Problem("InvalidSpec", invalid_spec_message(error))
            outcome.permanent = True
            await self._report(body, None, [], outcome)
            return outcome

        gateway_api = await self._serves_gateway_api()
        # Routes are listed wherever the cluster serves them, whatever the spec says now:
        # one rendered under traffic GatewayAPI, or left by a canary since removed, is
        # ours to keep current or delete.
        live = await self._live_children(namespace, name, body["metadata"]["uid"], gateway_api)
        now = self.now()
        transition = await self._step_canary(service, body, live, now)
        cache = model_cache.observe(
            service, service.status.model_cache if service.status else None, live
        )
        tracks = dataclasses.replace(
            plan(service, transition.status, gateway_api),
            model_claim=cache.serving_claim_name if cache else None,
        )
        rendered = render_fleet(service, tracks)
        outcome.on_demand_floor = on_demand_floor(
            service.spec.replicas, service.spec.spot.min_on_demand
        )
        if service.spec.canary is not None or transition.status.phase != state_machine.IDLE:
            outcome.canary_phase = transition.status.phase
        deployments: list[dict] = []
        # Pods mount the keys Secret: without it they would never start, so nothing is
        # applied, and nothing counts as kept in place (metrics read `rendered`).
        await self._ensure_api_keys_secret(service, body, outcome)
        if outcome.problem is None:
            outcome.rendered = rendered
        # What this pass applied or found, by (kind, name): a fill Job is judged by its claim.
        applied: dict[tuple[str, str], dict] = {}
        for manifest in outcome.rendered or []:
            desired = owned(manifest, body)
            current = live.pop(_key(desired), None)
            result = current
            if desired["kind"] == model_cache.JOB:
                claim = applied.get((model_cache.CLAIM, desired["metadata"]["name"]))
                action = model_cache.job_action(desired, current, claim)
            else:
                action = "apply" if drift.needs_apply(desired, current) else "keep"
            try:
                if action in ("replace", "delete"):
                    # A Job's pod template is immutable: a new rendering is a new Job.
                    await self._delete(current)
                    outcome.deleted.append(_describe(current))
                    current, result = None, None
                    action = "apply" if action == "replace" else "keep"
                if action == "apply":
                    result = await self.cluster.apply(desired, current)
                    (outcome.updated if current else outcome.created).append(_describe(desired))
            except ApiError as error:
                outcome.problem = Problem(
                    "ApplyFailed", f"{_describe(desired)}: {error.message}"[:1000]
                )
                outcome.failed_kind = desired["kind"]
                break
            applied[_key(desired)] = result
            if desired["kind"] == "Deployment":
                deployments.append(result)

        if outcome.problem is None:
            for key in model_cache.kept(cache):
                live.pop(key, None)
            for stale in live.values():
                try:
                    await self._delete(stale)
                except ApiError as error:
                    outcome.problem = Problem(
                        "DeleteFailed", f"{_describe(stale)}: {error.message}"[:1000]
                    )
                    outcome.failed_kind = stale["kind"]
                    break
                outcome.deleted.append(_describe(stale))
        self._remember_unwatched(body["metadata"]["uid"], outcome)

        for event in transition.events:
            await self._event(body, event.type, event.reason, event.message)
        await self._report(body, service, deployments, outcome, transition.status, tracks, cache)
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

    async def _delete(self, child: dict) -> None:
        metadata = child["metadata"]
        await self.cluster.delete(
            child["apiVersion"],
            child["kind"],
            metadata.get("namespace", "default"),
            metadata["name"],
            metadata["uid"],
        )

    async def _ensure_api_keys_secret(
        self, service: TTSService, body: dict, outcome: Outcome
    ) -> None:
        """Create the generated API keys Secret unless it is known to exist; one that exists
        (409) is never rewritten. Nothing is read: RBAC grants `create` on Secrets only."""
        name = api_keys.generated_secret_name(service)
        owner_uid = body["metadata"]["uid"]
        if name is None or owner_uid in self._api_keys_secret_exists:
            return
        secret = api_keys.render_api_keys_secret(service, api_keys.new_api_key())
        secret["metadata"]["ownerReferences"] = [owner_reference(body)]
        try:
            await self.cluster.create(secret)
        except ApiError as error:
            if error.status != 409:
                outcome.problem = Problem(
                    "ApiKeysSecretFailed", f"Secret {name}: {error.message}"[:1000]
                )
                outcome.failed_kind = "Secret"
                return
            # It exists (an earlier pass, an operator before a restart): that one stands.
        else:
            outcome.created.append(f"Secret {name}")
        self._remember_api_keys_secret(owner_uid)

    def _remember_unwatched(self, owner_uid: str, outcome: Outcome) -> None:
        """After the applies: whether the owner's next pass may skip listing the unwatched
        kinds. It may when this pass applied none of them and will delete what it listed;
        a pass that failed lists them again."""
        unwatched = {kind.kind for kind in child_kinds.ALL if not kind.watched}
        rendered = outcome.rendered or []
        if outcome.problem is None and not any(m["kind"] in unwatched for m in rendered):
            self._without_unwatched[owner_uid] = None
            while len(self._without_unwatched) > KNOWN_WITHOUT_UNWATCHED_MAX:
                del self._without_unwatched[next(iter(self._without_unwatched))]
        else:
            self._without_unwatched.pop(owner_uid, None)

    def _remember_api_keys_secret(self, owner_uid: str) -> None:
        self._api_keys_secret_exists[owner_uid] = None
        while len(self._api_keys_secret_exists) > KNOWN_API_KEYS_SECRETS_MAX:
            del self._api_keys_secret_exists[next(iter(self._api_keys_secret_exists))]

    async def _serves_gateway_api(self) -> bool:
        try:
            return await self.cluster.serves(
                child_kinds.HTTP_ROUTE.api_version, child_kinds.HTTP_ROUTE.kind
            )
        except ApiError as error:
            log.warning("Gateway API discovery failed: %s", error)
            return False

    async def _step_canary(
        self, service: TTSService, body: dict, live: dict[tuple[str, str], dict], now: str
    ) -> state_machine.Transition:
        """The rollout's next state; runs the analysis when an interval has passed."""
        spec = service.spec.canary
        previous = service.status.canary if service.status else None
        revision = candidate_revision(service)
        moment = state_machine.parse_time(now)
        action = (body["metadata"].get("annotations") or {}).get(state_machine.ACTION_ANNOTATION)
        analysis = None
        same_candidate = previous is not None and previous.revision == revision
        pending = state_machine.pending_action(previous, action, revision)
        if same_candidate and not pending and state_machine.analysis_due(spec, previous, moment):
            analysis = await self.analyse(service)
        return state_machine.next_state(
            spec,
            revision,
            previous,
            moment,
            analysis=analysis,
            action=action,
            stable_serves_candidate=_stable_serves(live, service.name, revision),
        )

    async def _live_children(
        self, namespace: str, name: str, owner_uid: str, gateway_api: bool = False
    ) -> dict[tuple[str, str], dict]:
        selector = {labels.SERVICE: name, labels.MANAGED_BY: labels.MANAGER}
        children = {}
        # Children of these kinds that carry the service's labels and our ownerReference
        # but are no longer rendered get deleted.
        for child_kind in child_kinds.ALL:
            if child_kind.optional and not gateway_api:
                continue
            if not child_kind.watched and owner_uid in self._without_unwatched:
                continue
            for obj in await self.cluster.list(
                child_kind.api_version, child_kind.kind, namespace, selector
            ):
                if _is_ours(obj, owner_uid):
                    obj.setdefault("apiVersion", child_kind.api_version)
                    obj.setdefault("kind", child_kind.kind)
                    children[_key(obj)] = obj
        return children

    async def _report(
        self,
        body: dict,
        service: TTSService | None,
        deployments: list[dict],
        outcome: Outcome,
        canary: CanaryStatus | None = None,
        tracks: Tracks | None = None,
        cache: ModelCacheStatus | None = None,
    ) -> None:
        """Events for what changed, then the status if it differs."""
        # One Event per verb and pass, naming every child: a new TTSService's first pass
        # creates six, and six Events would be as many writes as its children.
        for verb, items in (
            ("Created", outcome.created),
            ("Updated", outcome.updated),
            ("Deleted", outcome.deleted),
        ):
            if items:
                await self._event(body, "Normal", verb, f"{verb} {', '.join(items)}")
        previous = body.get("status") or {}
        if outcome.problem:
            if not _already_reported(previous, outcome.problem):
                await self._event(body, "Warning", outcome.problem.reason, outcome.problem.message)
            log.warning(
                "reconcile failed",
                extra={"service": body["metadata"]["name"], "reason": outcome.problem.reason},
            )

        if service is None:
            status = _invalid_spec_status(body, previous, outcome.problem, self.now())
        else:
            status = compute_status(
                service, previous, deployments, outcome.problem, self.now(), canary, tracks, cache
            )
        if any(previous.get(key) != value for key, value in status.items()):
            try:
                outcome.written = await self.cluster.patch_status(
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


def invalid_spec_message(error: ValidationError) -> str:
    """What is wrong with a spec, by field path: never the values (`runtime.env` may hold
    tokens, and the message lands in the status, an Event and the operator's log)."""
    problems = [
        f"{'.'.join(str(part) for part in problem['loc']) or 'spec'}: {problem['msg']}"
        for problem in error.errors(include_input=False, include_url=False)
    ]
    count = len(problems)
    summary = f"{count} validation error{'s' if count != 1 else ''} for {error.title}: "
    return (summary + "; ".join(problems))[:1000]


def _already_reported(status: dict, problem: Problem) -> bool:
    """The status already says Degraded for this very problem: a pass that fails the same
    way again (the period retrying a refused apply) posts no second Event for it."""
    degraded = conditions.find(status.get("conditions"), conditions.DEGRADED) or {}
    return (degraded.get("status"), degraded.get("reason"), degraded.get("message")) == (
        conditions.TRUE,
        problem.reason,
        problem.message,
    )


def _invalid_spec_status(body: dict, previous: dict, problem: Problem, now: str) -> dict:
    generation = body["metadata"].get("generation")
    old = previous.get("conditions")
    return {
        "observedGeneration": generation,
        "conditions": [
            conditions.condition(
                old,
                conditions.READY,
                conditions.FALSE,
                problem.reason,
                problem.message,
                generation,
                now,
            ),
            conditions.condition(
                old,
                conditions.DEGRADED,
                conditions.TRUE,
                problem.reason,
                problem.message,
                generation,
                now,
            ),
            # kstatus: Failed until the spec changes.
            conditions.condition(
                old,
                conditions.STALLED,
                conditions.TRUE,
                problem.reason,
                problem.message,
                generation,
                now,
            ),
        ],
    }
