"""The HorizontalPodAutoscaler: scales the TTSService itself through /scale.

The HPA writes `spec.replicas` of the TTSService; the operator splits that
number among the Deployments. One writer per Deployment's replicas, so no fight
between HPA, operator and GitOps. Metrics are the runtime's own Pods metrics,
served to the HPA by prometheus-adapter (rules ship with the chart later).
"""

from __future__ import annotations

from ttsfleet_operator import tts_service
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.tts_service import TTSService
from ttsfleet_runtime import metrics

# GPU pods take minutes to become useful: add capacity fast, in big steps.
SCALE_UP_PERIOD_SECONDS = 60
SCALE_UP_MAX_PODS = 4
SCALE_UP_MAX_PERCENT = 100
# Remove one pod at a time: a removed pod's streams drain for up to the grace period.
SCALE_DOWN_PERIOD_SECONDS = 60
SCALE_DOWN_MAX_PODS = 1


def gpu_utilization_target(percent: int) -> str:
    """The runtime exports utilisation as a 0..1 ratio; the spec speaks percent."""
    return f"{percent * 10}m"


def render_hpa(service: TTSService) -> dict:
    autoscaling = service.spec.autoscaling
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": child_metadata(service, service.name, "autoscaler"),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": tts_service.API_VERSION,
                "kind": tts_service.KIND,
                "name": service.name,
            },
            # Never below the on-demand floor: the floor is pods that must exist.
            "minReplicas": max(autoscaling.min_replicas, service.spec.spot.min_on_demand),
            "maxReplicas": autoscaling.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metrics.QUEUE_DEPTH},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": str(autoscaling.target_queue_depth),
                        },
                    },
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metrics.GPU_UTILIZATION},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": gpu_utilization_target(
                                autoscaling.target_gpu_utilization
                            ),
                        },
                    },
                },
            ],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "selectPolicy": "Max",
                    "policies": [
                        {
                            "type": "Pods",
                            "value": SCALE_UP_MAX_PODS,
                            "periodSeconds": SCALE_UP_PERIOD_SECONDS,
                        },
                        {
                            "type": "Percent",
                            "value": SCALE_UP_MAX_PERCENT,
                            "periodSeconds": SCALE_UP_PERIOD_SECONDS,
                        },
                    ],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": autoscaling.scale_down_stabilization_seconds,
                    "selectPolicy": "Min",
                    "policies": [
                        {
                            "type": "Pods",
                            "value": SCALE_DOWN_MAX_PODS,
                            "periodSeconds": SCALE_DOWN_PERIOD_SECONDS,
                        },
                    ],
                },
            },
        },
    }
