"""Where a pool's pods may run: GPU class (or CPU serving nodes), spot or on-demand capacity, zones.

Spot pods need a spot node (any of the big clouds' labels) and tolerate spot
taints; on-demand pods must never land on a spot node. A spec may replace the
spot node labels and tolerations; the on-demand pool then avoids those labels.
"""

from __future__ import annotations

from ttsfleet_operator import gpu_classes, labels
from ttsfleet_operator.tts_service import TTSService

# The spot labels of EKS/Karpenter, GKE and AKS. A node is spot if it has any.
DEFAULT_SPOT_NODE_LABELS: tuple[tuple[str, str], ...] = (
    ("karpenter.sh/capacity-type", "spot"),
    ("cloud.google.com/gke-spot", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)
# Taints spot pools carry: GKE's and AKS's own, and ttsfleet's for self-managed pools.
DEFAULT_SPOT_TOLERATIONS: tuple[dict, ...] = (
    {"key": "ttsfleet.io/spot", "operator": "Exists", "effect": "NoSchedule"},
    {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    },
    {
        "key": "kubernetes.azure.com/scalesetpriority",
        "operator": "Equal",
        "value": "spot",
        "effect": "NoSchedule",
    },
)
ZONE_KEY = "topology.kubernetes.io/zone"
HOSTNAME_KEY = "kubernetes.io/hostname"


def spot_node_labels(service: TTSService) -> list[tuple[str, str]]:
    override = service.spec.spot.node_selector
    return sorted(override.items()) if override else list(DEFAULT_SPOT_NODE_LABELS)


def class_node_selector(service: TTSService) -> dict[str, str]:
    """Nodes of the spec's GPU class (or the nodes set aside for CPU serving)."""
    gpu = service.spec.gpu
    return gpu_classes.node_selector(gpu.gpu_class, gpu.product)


def node_affinity(service: TTSService, pool: str) -> dict:
    spot_labels = spot_node_labels(service)
    if pool == labels.SPOT:
        if service.spec.spot.node_selector:
            # A user's selector is one set of labels a spot node has: all must match.
            terms = [
                {"matchExpressions": [_expression(key, "In", value) for key, value in spot_labels]}
            ]
        else:
            # Any one cloud's spot label marks a spot node: terms are ORed.
            terms = [
                {"matchExpressions": [_expression(key, "In", value)]} for key, value in spot_labels
            ]
    else:
        # NotIn also matches nodes without the label; every expression must hold.
        terms = [
            {"matchExpressions": [_expression(key, "NotIn", value) for key, value in spot_labels]}
        ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def _expression(key: str, operator: str, value: str) -> dict:
    return {"key": key, "operator": operator, "values": [value]}


def tolerations(service: TTSService, pool: str) -> list[dict]:
    result = [gpu_classes.class_toleration(service.spec.gpu.gpu_class)]
    if pool == labels.SPOT:
        override = service.spec.spot.tolerations
        result += (
            [t.wire() for t in override]
            if override
            else [dict(t) for t in DEFAULT_SPOT_TOLERATIONS]
        )
    return result


def topology_spread(pod_labels: dict[str, str]) -> list[dict]:
    """Spread each pool over zones, then nodes; GPUs are scarce, so prefer rather than require."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(pod_labels)},
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key in (ZONE_KEY, HOSTNAME_KEY)
    ]
