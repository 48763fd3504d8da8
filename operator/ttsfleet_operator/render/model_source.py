"""Where a pod finds its checkpoint: a hub id, or a directory on a mounted PVC."""

from __future__ import annotations

from ttsfleet_operator.tts_service import TTSService

PVC_MOUNT = "/models"


def model_location(service: TTSService) -> str:
    """What the server loads (`TTSFLEET_MODEL`): a hub id, or the checkpoint directory on the PVC."""
    hub_id = service.spec.model.hub_id()
    if hub_id is not None:
        return hub_id
    path = service.spec.model.source.pvc.path.strip("/")
    return f"{PVC_MOUNT}/{path}" if path else PVC_MOUNT


def uses_pvc(service: TTSService) -> bool:
    source = service.spec.model.source
    return source is not None and source.pvc is not None
