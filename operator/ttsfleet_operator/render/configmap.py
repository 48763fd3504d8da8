"""The engine ConfigMap: the runtime server's settings as `TTSFLEET_*` variables.

`ttsfleet serve` reads every flag's default from a `TTSFLEET_*` variable, so the
pods take this ConfigMap whole (`envFrom`) and run `ttsfleet serve` without
arguments. Pods carry the ConfigMap's hash, so a change rolls them.
"""

from __future__ import annotations

import hashlib
import json

from ttsfleet_operator import labels
from ttsfleet_operator.render import api_keys, names
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.render.model_source import model_location
from ttsfleet_operator.render.service import HTTP_PORT
from ttsfleet_operator.tts_service import TTSService


def engine_environment(service: TTSService) -> dict[str, str]:
    spec = service.spec
    engine, runtime, model = spec.engine, spec.runtime, spec.model
    environment = {
        "TTSFLEET_MODEL": model_location(service),
        "TTSFLEET_DEVICE": "cuda",
        "TTSFLEET_HOST": "0.0.0.0",
        "TTSFLEET_PORT": str(HTTP_PORT),
        "TTSFLEET_MAX_BATCH": str(engine.max_batch),
        "TTSFLEET_MAX_QUEUE": str(engine.max_queue),
        "TTSFLEET_DTYPE": engine.dtype,
        "TTSFLEET_CUDA_GRAPHS": "on" if engine.cuda_graphs else "off",
        "TTSFLEET_FIRST_CHUNK_FRAMES": str(engine.first_chunk_frames),
        # The server drains streams for this long after SIGTERM; the pod's grace
        # period adds the preStop pause on top.
        "TTSFLEET_DRAIN_TIMEOUT": str(runtime.termination_grace_seconds),
    }
    if model.revision:
        environment["TTSFLEET_MODEL_REVISION"] = model.revision
    environment.update(api_keys.auth_environment(service))
    return environment


def engine_config_hash(service: TTSService) -> str:
    text = json.dumps(engine_environment(service), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def render_configmap(service: TTSService, track: str = labels.STABLE) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(
            service, names.engine_config_name(service.name, track), "engine-config", {labels.TRACK: track}
        ),
        "data": engine_environment(service),
    }
