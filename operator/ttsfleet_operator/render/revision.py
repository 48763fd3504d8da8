"""A revision: the short hash of what a track serves (image, checkpoint, engine settings)."""

from __future__ import annotations

import hashlib
import json

from ttsfleet_operator.render import configmap
from ttsfleet_operator.render.model_source import model_location, uses_cache
from ttsfleet_operator.tts_service import TTSService


def revision(service: TTSService) -> str:
    """With model.cache, the model revision is left out: pods move to a new revision when
    its cache is Ready (the claim in their template changes), not when the spec says so."""
    identity = [
        service.spec.runtime.image,
        model_location(service),
        "" if uses_cache(service) else service.spec.model.revision or "",
        configmap.engine_config_hash(service),
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:10]
