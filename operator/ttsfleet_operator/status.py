"""The TTSService status, computed from the spec and the child Deployments."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from ttsfleet_operator import conditions, labels
from ttsfleet_operator.conditions import DEGRADED, FALSE, PROGRESSING, READY, TRUE
from ttsfleet_operator.render import configmap, names
from ttsfleet_operator.render.fleet import stable_split
from ttsfleet_operator.render.model_source import model_location
from ttsfleet_operator.render.service import HTTP_PORT
from ttsfleet_operator.tts_service import TTSService


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why reconciling failed, for the Degraded condition."""

    reason: str
    message: str


def stable_revision(service: TTSService) -> str:
    """Identity of what the stable track serves: image, checkpoint, engine settings."""
    identity = [
        service.spec.runtime.image,
        model_location(service),
        service.spec.model.revision or "",
        configmap.engine_config_hash(service),
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:10]


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
            if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
                return Problem("ProgressDeadlineExceeded", f"Deployment {name}: {cond.get('message', '')}".strip())
            if cond.get("type") == "ReplicaFailure" and cond.get("status") == TRUE:
                return Problem("ReplicaFailure", f"Deployment {name}: {cond.get('message', '')}".strip())
    return None


def _rolled_out(deployments: list[dict]) -> bool:
    return all(
        d.get("status", {}).get("observedGeneration", 0) >= d.get("metadata", {}).get("generation", 0)
        for d in deployments
    )


def compute_status(
    service: TTSService, previous: dict | None, deployments: list[dict], problem: Problem | None, now: str
) -> dict:
    """The whole status object; equal inputs give an equal status (no spurious writes)."""
    previous = previous or {}
    old_conditions = previous.get("conditions")
    generation = service.metadata.get("generation")
    numbers = _deployment_numbers(deployments)
    desired = service.spec.replicas
    problem = problem or _deployment_problem(deployments)

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
    if settled:
        progressing = (FALSE, "RolloutComplete", f"{desired} replicas up to date")
    else:
        progressing = (
            TRUE,
            "RollingOut",
            f"{numbers['updated']} of {desired} replicas updated, {numbers['ready']} ready",
        )

    if desired == 0:
        ready = (FALSE, "ScaledToZero", "spec.replicas is 0")
    elif numbers["ready"] >= desired and not problem:
        ready = (TRUE, "AllReplicasReady", f"{numbers['ready']} of {desired} replicas ready")
    else:
        ready = (FALSE, "ReplicasNotReady", f"{numbers['ready']} of {desired} replicas ready")

    split = stable_split(service)
    return {
        "observedGeneration": generation,
        "conditions": [
            conditions.condition(old_conditions, type_, *values, generation=generation, now=now)
            for type_, values in ((READY, ready), (PROGRESSING, progressing), (DEGRADED, degraded))
        ],
        "replicas": numbers["replicas"],
        "readyReplicas": numbers["ready"],
        "selector": labels.selector_string(labels.pod_selector(service.name)),
        "pools": {"onDemand": split.on_demand, "spot": split.spot},
        "stableRevision": stable_revision(service),
        "canaryWeight": 0,
        "endpoint": names.endpoint(names.service_name(service.name), service.namespace, HTTP_PORT),
    }
