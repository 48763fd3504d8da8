"""Where a pod finds its checkpoint: a hub id, or a directory on a mounted volume (the
user's PVC, or the model cache the operator fills)."""

from __future__ import annotations

from ttsfleet_operator.tts_service import TTSService
from ttsfleet_runtime import model_cache

PVC_MOUNT = "/models"
# The pod's scratch volume (an emptyDir): the hub's downloads, and compiled kernels when
# there is no model cache (kept across the container's restarts, not for a new pod).
CACHE_DIR = "/var/cache/ttsfleet"
# The model cache's writable part (a subPath of its claim): compiled kernels every pod shares.
COMPILE_CACHE_MOUNT = "/var/cache/ttsfleet-compile"


def model_location(service: TTSService) -> str:
    """What the server loads (`TTSFLEET_MODEL`): a hub id, or the checkpoint directory on the volume."""
    if uses_cache(service):
        return f"{PVC_MOUNT}/{model_cache.CHECKPOINT_DIR}"
    hub_id = service.spec.model.hub_id()
    if hub_id is not None:
        return hub_id
    path = service.spec.model.source.pvc.path.strip("/")
    return f"{PVC_MOUNT}/{path}" if path else PVC_MOUNT


def compile_cache_dir(service: TTSService) -> str:
    """Where the server keeps compiled kernels (`TTSFLEET_COMPILE_CACHE_DIR`): on the model
    cache when there is one, so a new pod loads them instead of compiling for tens of
    seconds; else on the pod's scratch volume."""
    return COMPILE_CACHE_MOUNT if uses_cache(service) else f"{CACHE_DIR}/compile"


def uses_pvc(service: TTSService) -> bool:
    source = service.spec.model.source
    return source is not None and source.pvc is not None


def uses_cache(service: TTSService) -> bool:
    """Pods read the checkpoint from the model cache and never download it."""
    return service.spec.model.cache.enabled


def downloads(service: TTSService) -> bool:
    """Each pod fetches the checkpoint from the hub at start."""
    return not uses_pvc(service) and not uses_cache(service)
