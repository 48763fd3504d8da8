"""The PodDisruptionBudget: node drains take GPU pods one at a time."""

from __future__ import annotations

from ttsfleet_operator import labels
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.tts_service import TTSService


def render_pdb(service: TTSService) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(service, service.name, "disruption-budget"),
        "spec": {
            # maxUnavailable (not minAvailable) so a single-replica service can still be drained.
            "maxUnavailable": 1,
            "selector": {"matchLabels": labels.pod_selector(service.name)},
            # A pod that never became ready (bad node, OOM loop) must not block a drain.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
