"""The engine ConfigMap: the runtime server's settings as `TTSFLEET_*` variables.

`ttsfleet serve` reads every flag's default from a `TTSFLEET_*` variable, so the
pods take this ConfigMap whole (`envFrom`) and run `ttsfleet serve` without
arguments. Settings are named as in the runtime's catalogue
(`ttsfleet_runtime.settings`), which spells their variables and values and refuses a
value the server would refuse. Pods carry the ConfigMap's hash, so a change rolls them.
"""

from __future__ import annotations

import hashlib
import json

from ttsfleet_operator import drift, gpu_classes, labels
from ttsfleet_operator.render import api_keys, names
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.render.model_source import compile_cache_dir, model_location, uses_cache
from ttsfleet_operator.render.service import HTTP_PORT
from ttsfleet_operator.tts_service import TTSService
from ttsfleet_runtime import settings


def engine_environment(service: TTSService) -> dict[str, str]:
    """The pod's runtime settings (by catalogue name) as the variables `serve` reads."""
    spec = service.spec
    engine, runtime, model = spec.engine, spec.runtime, spec.model
    values = {
        "model": model_location(service),
        # The runtime reads the frame rate from the checkpoint; this makes it refuse
        # one of another rate (a custom source must hold what the spec says).
        "tokenizer_rate_hz": model.tokenizer_rate_hz,
        "device": "cuda" if gpu_classes.has_gpu(spec.gpu.gpu_class) else "cpu",
        "host": "0.0.0.0",
        "port": HTTP_PORT,
        "max_batch": engine.max_batch,
        "max_len": engine.max_len,
        "kv_cache_memory": engine.kv_cache_memory,
        "max_queue": engine.max_queue,
        "max_audio_seconds": engine.max_audio_seconds,
        "dtype": engine.dtype,
        "weights": engine.weights,
        "cuda_graphs": engine.cuda_graphs,
        "compile_cache_dir": compile_cache_dir(service),
        "first_chunk_frames": engine.first_chunk_frames,
        # The server drains streams for this long after SIGTERM; the pod's grace
        # period adds the preStop pause on top.
        "drain_timeout_s": runtime.termination_grace_seconds,
        # A cache holds one revision, in a local directory the runtime loads as it is.
        "model_revision": None if uses_cache(service) else model.revision,
        "voice_retention_days": spec.voices.retention_days if spec.voices else None,
        **_cache_settings(service),
        **_batch_settings(service),
    }
    values.update(api_keys.auth_settings(service))
    return settings.environment(values)


def _batch_settings(service: TTSService) -> dict:
    """spec.batch's settings shared by every pool; whose pods run workers is the
    Deployment's (deployment.batch_worker_env)."""
    batch = service.spec.batch
    if batch is None:
        return {}
    return {"batch_api": True, "batch_lease_s": batch.lease_seconds}


def _cache_settings(service: TTSService) -> dict:
    """spec.cache's plain settings; its Redis URL and S3 keys come from Secrets
    (deployment.py), never through the ConfigMap."""
    cache = service.spec.cache
    if cache is None:
        return {}
    values = {
        "response_cache_memory_bytes": int(drift.parse_quantity(cache.memory) or 0),
        "response_cache_max_object_bytes": cache.max_object_bytes,
    }
    if cache.redis is not None:
        values["response_cache_redis_ttl_s"] = cache.redis.ttl_seconds
    if cache.s3 is not None:
        values |= {
            "response_cache_s3_endpoint": cache.s3.endpoint,
            "response_cache_s3_bucket": cache.s3.bucket,
            "response_cache_s3_prefix": cache.s3.prefix,
            "response_cache_s3_region": cache.s3.region,
            "response_cache_s3_ttl_days": cache.s3.ttl_days,
        }
    return values


def engine_config_hash(service: TTSService) -> str:
    text = json.dumps(engine_environment(service), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def render_configmap(service: TTSService, track: str = labels.STABLE) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(
            service,
            names.engine_config_name(service.name, track),
            "engine-config",
            {labels.TRACK: track},
        ),
        "data": engine_environment(service),
    }
