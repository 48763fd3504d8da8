"""Object metadata shared by every rendered child."""

from __future__ import annotations

from ttsfleet_operator import labels
from ttsfleet_operator.tts_service import TTSService


def child_metadata(
    service: TTSService, name: str, component: str, extra_labels: dict | None = None
) -> dict:
    """apiVersion/kind are the caller's; ownerReferences are added by the operator at apply time."""
    return {
        "name": name,
        "namespace": service.namespace,
        "labels": {
            **labels.service_labels(service.name),
            labels.COMPONENT: component,
            **(extra_labels or {}),
        },
    }
