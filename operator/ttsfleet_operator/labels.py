"""The one place that knows label keys and the values the operator writes.

Pods, Deployments, the Service, the PDB, the HPA's /scale selector, the canary
analysis (Prometheus keeps `track`) and the e2e tests all read these names.
"""

from __future__ import annotations

NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "app.kubernetes.io/part-of"
SERVICE = "ttsfleet.io/service"
TRACK = "ttsfleet.io/track"
POOL = "ttsfleet.io/pool"

RUNTIME_APP = "ttsfleet-runtime"
# The model cache fill's pods: apart from the runtime's, so no Service, PDB or HPA
# selector (pod_selector) ever counts them.
MODEL_CACHE_APP = "ttsfleet-model-cache"
MANAGER = "ttsfleet-operator"

STABLE = "stable"
CANARY = "canary"
ON_DEMAND = "on-demand"
SPOT = "spot"

# Annotation on every child: hash of what the operator last rendered for it, so
# a change in the spec is seen even when it only removes fields.
RENDERED_HASH = "ttsfleet.io/rendered-hash"
# Deployment and pod template annotation: the revision (render/revision.py) the pods serve,
# so the canary state machine can tell when stable runs a promoted candidate.
REVISION = "ttsfleet.io/revision"
# Pod template annotation: hash of the engine ConfigMap, so pods roll when it changes.
ENGINE_CONFIG_HASH = "ttsfleet.io/engine-config-hash"


def service_labels(service_name: str) -> dict[str, str]:
    """Labels every child of a TTSService carries (owner lookups and cleanup use them)."""
    return {
        NAME: RUNTIME_APP,
        INSTANCE: service_name,
        MANAGED_BY: MANAGER,
        PART_OF: "ttsfleet",
        SERVICE: service_name,
    }


def pod_selector(service_name: str) -> dict[str, str]:
    """Selects every runtime pod of a service: all pools, both tracks."""
    return {NAME: RUNTIME_APP, SERVICE: service_name}


def pool_selector(service_name: str, track: str, pool: str) -> dict[str, str]:
    """Selects the pods of one Deployment. Immutable once created: never change it."""
    return {**pod_selector(service_name), TRACK: track, POOL: pool}


def track_selector(service_name: str, track: str) -> dict[str, str]:
    """Selects the pods of one track, all pools (the Gateway API backends)."""
    return {**pod_selector(service_name), TRACK: track}


def selector_string(selector: dict[str, str]) -> str:
    """`k=v,k=v` form: the /scale subresource and the HPA want a string."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
