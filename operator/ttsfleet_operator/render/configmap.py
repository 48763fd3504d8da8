"""The engine ConfigMap each runtime pod mounts at /etc/ttsfleet."""

from __future__ import annotations

import hashlib
import json

from ttsfleet_operator.render import names
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.tts_service import TTSService

ENGINE_CONFIG_KEY = "engine.json"
MOUNT_PATH = "/etc/ttsfleet"
ENGINE_CONFIG_PATH = f"{MOUNT_PATH}/{ENGINE_CONFIG_KEY}"


def engine_config(service: TTSService) -> dict:
    """What `ttsfleet serve --engine-config` reads: the model identity and engine knobs."""
    model = service.spec.model
    return {
        "model": {"size": model.size, "variant": model.variant, "tokenizerRateHz": model.tokenizer_rate_hz},
        "engine": service.spec.engine.wire(),
    }


def engine_config_text(service: TTSService) -> str:
    return json.dumps(engine_config(service), indent=2, sort_keys=True) + "\n"


def engine_config_hash(service: TTSService) -> str:
    """Pods carry it as an annotation, so a config change rolls them."""
    return hashlib.sha256(engine_config_text(service).encode()).hexdigest()[:16]


def render_configmap(service: TTSService) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(service, names.engine_config_name(service.name), "engine-config"),
        "data": {ENGINE_CONFIG_KEY: engine_config_text(service)},
    }
