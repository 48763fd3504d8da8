"""The TTSService status, computed from the spec and the child Deployments."""

from __future__ import annotations

import dataclasses

from ttsfleet_operator import conditions, labels, model_cache
from ttsfleet_operator.canary import state_machine
from ttsfleet_operator.conditions import (
    CANARY_PROGRESSING,
    DEGRADED,
    FALSE,
    PROGRESSING,
    READY,
    RECONCILING,
    STALLED,
    TRUE,
)
from ttsfleet_operator.render import names
from ttsfleet_operator.render.fleet import Tracks, fleet_split
from ttsfleet_operator.render.revision import revision
from ttsfleet_operator.render.service import HTTP_PORT
from ttsfleet_operator.tts_service import CanaryStatus, ModelCacheStatus, TTSService


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why reconciling failed, for the Degraded condition."""

    reason: str
    message: str


def _canary_condition(canary: CanaryStatus) -> tuple[str, str, str]:
    """True while the rollout moves (Progressing, Promoting); False with the phase as reason otherwise."""
    active = canary.phase in (state_machine.PROGRESSING, state_machine.PROMOTING)
    reason = {state_machine.IDLE: "NoCanary"}.get(canary.phase, canary.phase)
    return (TRUE if active else FALSE, reason, canary.message)


def _deployment_numbers(deployments: list[dict]) -> dict[str, int]:
    def total(field: str) -> int:
        return sum(d.get("status", {}).get(field, 0) or 0 for d in deployments)

    return {
        "desired": sum(d.get("spec", {}).get("replicas", 0) or 0 for d in deployments),
        "replicas": total("replicas"),
        "ready": total("readyReplicas"),
        "updated": total("updatedReplicas"),
    }


def _deployment_problem(deployments: list[dict]) -> Problem | None:
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        for cond in deployment.get("status", {}).get("conditions", []) or []:
            if (
                cond.get("type") == "Progressing"
                and cond.get("reason") == "ProgressDeadlineExceeded"
            ):
                return Problem(
                    "ProgressDeadlineExceeded",
                    f"Deployment {name}: {cond.get('message', '')}".strip(),
                )
            if cond.get("type") == "ReplicaFailure" and cond.get("status") == TRUE:
                return Problem(
                    "ReplicaFailure", f"Deployment {name}: {cond.get('message', '')}".strip()
                )
    return None


def _rolled_out(deployments: list[dict]) -> bool:
    return all(
        d.get("status", {}).get("observedGeneration", 0)
        >= d.get("metadata", {}).get("generation", 0)
        for d in deployments
    )


def compute_status(
    service: TTSService,
    previous: dict | None,
    deployments: list[dict],
    problem: Problem | None,
    now: str,
    canary: CanaryStatus | None = None,
    tracks: Tracks | None = None,
    cache: ModelCacheStatus | None = None,
) -> dict:
    """The whole status object; equal inputs give an equal status (no spurious writes)."""
    previous = previous or {}
    old_conditions = previous.get("conditions")
    generation = service.metadata.get("generation")
    tracks = tracks or Tracks(stable=service)
    numbers = _deployment_numbers(deployments)
    weight = tracks.weight if tracks.candidate is not None else 0
    split = fleet_split(service, weight)
    desired = split.total
    problem = problem or _deployment_problem(deployments)
    if problem is None and canary is not None and canary.phase == state_machine.ROLLED_BACK:
        problem = Problem("CanaryRolledBack", canary.message)
    # A failed fill degrades the service; the pods still serve the cache they mount.
    serving_problem = problem
    if problem is None and cache is not None and cache.phase == model_cache.FAILED:
        problem = Problem(
            "ModelCacheFailed", f"{cache.claim_name}: {cache.reason}: {cache.message}"[:1000]
        )
    # The pods wait for a cache: the first one, or a new one the spec asks for.
    filling = cache is not None and cache.serving_claim_name != cache.claim_name

    if problem:
        degraded = (TRUE, problem.reason, problem.message)
    else:
        degraded = (FALSE, "AsExpected", "")

    settled = (
        _rolled_out(deployments)
        and numbers["desired"] == desired
        and numbers["updated"] == desired
        and numbers["replicas"] == desired
        and numbers["ready"] >= desired
    )
    if filling and cache.phase != model_cache.FAILED:
        progressing = (TRUE, "ModelCacheFilling", f"{cache.claim_name}: {cache.message}")
    elif settled:
        progressing = (FALSE, "RolloutComplete", f"{desired} replicas up to date")
    else:
        progressing = (
            TRUE,
            "RollingOut",
            f"{numbers['updated']} of {desired} replicas updated, {numbers['ready']} ready",
        )

    if desired == 0:
        ready = (FALSE, "ScaledToZero", "spec.replicas is 0")
    elif cache is not None and cache.serving_claim_name is None:
        ready = (FALSE, f"ModelCache{cache.phase}", f"{cache.claim_name}: {cache.message}")
    elif numbers["ready"] >= desired and not serving_problem:
        ready = (TRUE, "AllReplicasReady", f"{numbers['ready']} of {desired} replicas ready")
    else:
        ready = (FALSE, "ReplicasNotReady", f"{numbers['ready']} of {desired} replicas ready")

    if (
        desired > 0
        and problem
        and problem.reason == "CanaryRolledBack"
        and numbers["ready"] >= split.stable
    ):
        # The candidate is at 0 pods; stable serving everything is ready (Degraded says why).
        ready = (TRUE, "StableReady", f"{numbers['ready']} of {split.stable} stable replicas ready")

    checks = [(READY, ready), (PROGRESSING, progressing), (DEGRADED, degraded)]
    has_canary = canary is not None and (
        service.spec.canary is not None or canary.revision is not None
    )
    canary_condition = _canary_condition(canary) if has_canary else None
    if canary_condition is not None:
        checks.append((CANARY_PROGRESSING, canary_condition))
    if canary_condition is not None and canary_condition[0] == TRUE:
        reconciling = (TRUE, "CanaryProgressing", canary_condition[2])
    elif progressing[0] == TRUE:
        reconciling = progressing
    else:
        reconciling = (FALSE, "Reconciled", "")
    rolled_back = canary is not None and canary.phase == state_machine.ROLLED_BACK and has_canary
    stalled = (
        (TRUE, "CanaryRolledBack", canary.message) if rolled_back else (FALSE, "AsExpected", "")
    )
    checks += [(RECONCILING, reconciling), (STALLED, stalled)]
    return {
        "observedGeneration": generation,
        "conditions": [
            conditions.condition(old_conditions, type_, *values, generation=generation, now=now)
            for type_, values in checks
        ],
        "replicas": numbers["replicas"],
        "readyReplicas": numbers["ready"],
        "selector": labels.selector_string(labels.pod_selector(service.name)),
        "pools": {"onDemand": split.on_demand, "spot": split.spot},
        "canaryPools": {"onDemand": split.canary_on_demand, "spot": split.canary_spot}
        if tracks.candidate
        else None,
        "stableRevision": revision(tracks.stable),
        "canaryRevision": revision(tracks.candidate) if tracks.candidate is not None else None,
        "canaryWeight": weight,
        "endpoint": names.endpoint(names.service_name(service.name), service.namespace, HTTP_PORT),
        "canary": canary.wire() if has_canary else None,
        "modelCache": cache.wire() if cache is not None else None,
    }
