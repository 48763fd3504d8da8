"""The HorizontalPodAutoscaler: scales the TTSService itself through /scale.

The HPA writes `spec.replicas` of the TTSService; the operator splits that
number among the Deployments. One writer per Deployment's replicas, so no fight
between HPA, operator and GitOps. Metrics are the runtime's own Pods metrics,
served to the HPA by prometheus-adapter (rules ship with the chart later).
"""

from __future__ import annotations

from ttsfleet_operator import gpu_classes, tts_service
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


def _pods_metric(name: str, average_value: str) -> dict:
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": name},
            "target": {"type": "AverageValue", "averageValue": average_value},
        },
    }


def _metrics(service: TTSService) -> list[dict]:
    """Queue depth always; GPU utilisation where the pods have a GPU to measure."""
    autoscaling = service.spec.autoscaling
    result = [_pods_metric(metrics.QUEUE_DEPTH, str(autoscaling.target_queue_depth))]
    if gpu_classes.has_gpu(service.spec.gpu.gpu_class):
        result.append(
            _pods_metric(
                metrics.GPU_UTILIZATION,
                gpu_utilization_target(autoscaling.target_gpu_utilization),
            )
        )
    return result


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
            "metrics": _metrics(service),
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
