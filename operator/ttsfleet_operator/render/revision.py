"""A revision: the short hash of what a track serves (image, checkpoint, engine settings)."""

from __future__ import annotations

import hashlib
import json

from ttsfleet_operator.render import configmap
from ttsfleet_operator.render.model_source import model_location
from ttsfleet_operator.tts_service import TTSService


def revision(service: TTSService) -> str:
    identity = [
        service.spec.runtime.image,
        model_location(service),
        service.spec.model.revision or "",
        configmap.engine_config_hash(service),
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:10]
