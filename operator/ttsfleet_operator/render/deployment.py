"""The runtime Deployment of one pool (on-demand or spot) of one track.

Each pod runs `ttsfleet serve` on its GPU (or CPU, for the `cpu` class): probes sized for a model load that
takes minutes, a drain window for in-flight audio streams, and the restricted
Pod Security profile (non-root, read-only root, no capabilities).
"""

from __future__ import annotations

from ttsfleet_operator import gpu_classes, labels
from ttsfleet_operator.render import api_keys, configmap, names, pod_security, scheduling
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.render.model_source import (
    CACHE_DIR,
    COMPILE_CACHE_MOUNT,
    PVC_MOUNT,
    downloads,
    uses_cache,
    uses_pvc,
)
from ttsfleet_operator.render.revision import revision
from ttsfleet_operator.render.service import HTTP_PORT, HTTP_PORT_NAME
from ttsfleet_operator.tts_service import TTSService
from ttsfleet_runtime import model_cache
from ttsfleet_runtime.settings import SETTINGS as RUNTIME_SETTINGS

STARTUP_PROBE_PERIOD_SECONDS = 10
# Time for endpoints to drop the pod before the server starts draining.
PRE_STOP_SLEEP_SECONDS = 10
READY_PATH = "/health/ready"
LIVE_PATH = "/health/live"
METRICS_PATH = "/metrics"


def startup_timeout_seconds(service: TTSService) -> int:
    """The spec's, else the measured start-up budget (gpu_classes) for its size and GPU."""
    runtime = service.spec.runtime
    if runtime.startup_timeout_seconds is not None:
        return runtime.startup_timeout_seconds
    return gpu_classes.startup_budget_seconds(
        service.spec.gpu.gpu_class, service.spec.model.size, downloads(service)
    )


def render_deployment(
    service: TTSService, track: str, pool: str, replicas: int, model_claim: str | None = None
) -> dict:
    """`service` is what this track serves (the candidate's image and model revision for the canary);
    `model_claim` the model cache the pods mount, with model.cache enabled."""
    pod_labels = labels.pool_selector(service.name, track, pool)
    metadata = child_metadata(
        service,
        names.deployment_name(service.name, track, pool),
        "runtime",
        {labels.TRACK: track, labels.POOL: pool},
    )
    metadata["annotations"] = {labels.REVISION: revision(service)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": pod_labels},
            "revisionHistoryLimit": 3,
            # A rollout may wait for a slow model load before it is called stuck.
            "progressDeadlineSeconds": startup_timeout_seconds(service) + 300,
            # Never drop below the current serving capacity during a rollout.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": {
                        **labels.service_labels(service.name),
                        labels.COMPONENT: "runtime",
                        **pod_labels,
                    },
                    "annotations": {
                        labels.ENGINE_CONFIG_HASH: configmap.engine_config_hash(service),
                        labels.REVISION: revision(service),
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(HTTP_PORT),
                        "prometheus.io/path": METRICS_PATH,
                    },
                },
                "spec": _pod_spec(service, pool, pod_labels, model_claim),
            },
        },
    }


def _pod_spec(
    service: TTSService, pool: str, pod_labels: dict[str, str], model_claim: str | None
) -> dict:
    runtime = service.spec.runtime
    spec = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": runtime.termination_grace_seconds + PRE_STOP_SLEEP_SECONDS,
        "securityContext": pod_security.pod_security_context(),
        "nodeSelector": scheduling.class_node_selector(service),
        "affinity": scheduling.node_affinity(service, pool),
        "tolerations": scheduling.tolerations(service, pool),
        "topologySpreadConstraints": scheduling.topology_spread(pod_labels),
        "containers": [_runtime_container(service, pod_labels[labels.TRACK], pool)],
        "volumes": _volumes(service, model_claim),
    }
    if runtime.service_account_name:
        spec["serviceAccountName"] = runtime.service_account_name
    if runtime.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in runtime.image_pull_secrets]
    return spec


def _runtime_container(service: TTSService, track: str, pool: str) -> dict:
    runtime = service.spec.runtime
    resources = runtime.resources
    requests: dict[str, str] = {"cpu": resources.cpu, "memory": resources.memory}
    limits: dict[str, str] = {"memory": resources.memory}
    if gpu_classes.has_gpu(service.spec.gpu.gpu_class):
        requests[gpu_classes.GPU_RESOURCE] = limits[gpu_classes.GPU_RESOURCE] = str(
            service.spec.gpu.count
        )
    http_get = {"port": HTTP_PORT_NAME}
    env = [
        {"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
        {"name": "TTSFLEET_SERVICE", "value": service.name},
    ]
    if not downloads(service):
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    voices = service.spec.voices
    if voices is not None:
        # The URL may carry a password: from the Secret, never through the ConfigMap.
        url = voices.store.redis.url_secret
        env.append(
            {
                "name": RUNTIME_SETTINGS["voice_store_url"].env,
                "valueFrom": {"secretKeyRef": {"name": url.name, "key": url.key}},
            }
        )
    env += _cache_secrets(service)
    env += batch_worker_env(service, pool)
    env += [item.wire() for item in runtime.env or []]
    return {
        "name": "runtime",
        "image": runtime.image,
        "imagePullPolicy": runtime.image_pull_policy,
        # Every setting comes from the engine ConfigMap as TTSFLEET_* variables.
        "command": ["ttsfleet"],
        "args": ["serve"],
        "envFrom": [{"configMapRef": {"name": names.engine_config_name(service.name, track)}}],
        "env": env,
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": {"requests": requests, "limits": limits},
        # Download + load + CUDA graph capture can take many minutes; until this
        # passes, liveness is off and the pod gets no traffic.
        "startupProbe": {
            "httpGet": {**http_get, "path": READY_PATH},
            "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": -(
                -startup_timeout_seconds(service) // STARTUP_PROBE_PERIOD_SECONDS
            ),
        },
        "readinessProbe": {
            "httpGet": {**http_get, "path": READY_PATH},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {**http_get, "path": LIVE_PATH},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Let the endpoint removal reach every proxy before the server stops
        # admitting; then SIGTERM makes it drain in-flight streams.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}},
        "securityContext": pod_security.container_security_context(),
        "volumeMounts": _volume_mounts(service),
    }


def batch_worker_env(service: TTSService, pool: str) -> list[dict]:
    """spec.batch's worker concurrency on the pools it names (0 elsewhere: they only serve
    the API). Per Deployment, so it overrides nothing the ConfigMap all pools share says."""
    batch = service.spec.batch
    if batch is None:
        return []
    runs = batch.pools in ("both", pool)
    return [
        {
            "name": RUNTIME_SETTINGS["batch_worker_concurrency"].env,
            "value": str(batch.concurrency if runs else 0),
        }
    ]


def _cache_secrets(service: TTSService) -> list[dict]:
    """spec.cache's Redis URL and S3 keys, each from its Secret key (never the ConfigMap)."""
    cache = service.spec.cache
    refs = {}
    if cache is not None and cache.redis is not None:
        refs["response_cache_redis_url"] = cache.redis.url_secret
    if cache is not None and cache.s3 is not None:
        refs["response_cache_s3_access_key"] = cache.s3.access_key_secret
        refs["response_cache_s3_secret_key"] = cache.s3.secret_key_secret
    return [
        {
            "name": RUNTIME_SETTINGS[setting].env,
            "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
        }
        for setting, ref in refs.items()
    ]


def _volumes(service: TTSService, model_claim: str | None) -> list[dict]:
    resources = service.spec.runtime.resources
    volumes = [
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "model-cache", "emptyDir": {"sizeLimit": resources.cache_size}},
        # PyTorch and NCCL use /dev/shm; the container default (64 MiB) is too small.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
    ]
    if uses_pvc(service):
        claim = {"claimName": service.spec.model.source.pvc.claim_name, "readOnly": True}
        volumes.append({"name": "model", "persistentVolumeClaim": claim})
    elif model_claim is not None:
        # Writable for the compile cache's subPath alone: the mounts say what is read-only.
        volumes.append({"name": "model", "persistentVolumeClaim": {"claimName": model_claim}})
    keys_secret = api_keys.mounted_secret_name(service)
    if keys_secret:
        volumes.append(
            {
                "name": "api-keys",
                "secret": {
                    "secretName": keys_secret,
                    "items": [
                        {"key": api_keys.API_KEYS_SECRET_KEY, "path": api_keys.API_KEYS_SECRET_KEY}
                    ],
                },
            }
        )
    return volumes


def _volume_mounts(service: TTSService) -> list[dict]:
    mounts = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "model-cache", "mountPath": CACHE_DIR},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if uses_pvc(service) or uses_cache(service):
        mounts.append({"name": "model", "mountPath": PVC_MOUNT, "readOnly": True})
    if uses_cache(service):
        mounts.append(
            {
                "name": "model",
                "mountPath": COMPILE_CACHE_MOUNT,
                "subPath": model_cache.COMPILE_CACHE_DIR,
            }
        )
    if api_keys.mounted_secret_name(service):
        mounts.append({"name": "api-keys", "mountPath": api_keys.API_KEYS_DIR, "readOnly": True})
    return mounts
