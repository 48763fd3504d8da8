"""The model cache: a PersistentVolumeClaim and the Job that fills it once from the hub.

The claim and the Job share one name, `<svc>-model-<key>`, where the key hashes what the
cache holds (repository, revision) and where (size, storage class, access mode): a change
to any of them is a new cache, filled beside the old one while the pods keep serving from
it (model_cache.py, one level up, decides when the pods move). Claims are never resized or
edited in place, so no apply is ever refused for an immutable field.

The Job runs `ttsfleet fetch` in the runtime image (checkpoint/fetch.py of the runtime):
download, verify against the hub's sizes and hashes, then write the marker. Failures a
retry cannot fix (token refused, no such revision, verification) exit with the codes of
`ttsfleet_runtime.model_cache`, which the podFailurePolicy turns into a failed Job at
once; anything else (the network) is retried with the Job's backoff.
"""

from __future__ import annotations

import hashlib
import json

from ttsfleet_operator import labels
from ttsfleet_operator.render import names, pod_security
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.render.model_source import PVC_MOUNT
from ttsfleet_operator.tts_service import TTSService
from ttsfleet_runtime import model_cache

COMPONENT = "model-cache"
FILL_CONTAINER = "fetch"
# Annotation on the claim and the Job: the hub repository and revision the cache holds.
HOLDS_ANNOTATION = "ttsfleet.io/model"
# Retries of a fill that failed for a reason worth retrying (the network, the hub's 5xx).
FILL_BACKOFF_LIMIT = 6
DEFAULT_REVISION = "main"


def cache_revision(service: TTSService) -> str:
    return service.spec.model.revision or DEFAULT_REVISION


def cache_claim_name(service: TTSService) -> str:
    """The name of the cache this spec asks for: it changes with what or where it stores."""
    cache = service.spec.model.cache
    identity = [
        service.spec.model.hub_id(),
        cache_revision(service),
        cache.size,
        cache.storage_class_name or "",
        cache.access_mode,
    ]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:8]
    return names.model_cache_name(service.name, key)


def _metadata(service: TTSService) -> dict:
    metadata = child_metadata(service, cache_claim_name(service), COMPONENT)
    metadata["annotations"] = {
        HOLDS_ANNOTATION: f"{service.spec.model.hub_id()}@{cache_revision(service)}"
    }
    return metadata


def render_cache_claim(service: TTSService) -> dict:
    cache = service.spec.model.cache
    spec = {
        "accessModes": [cache.access_mode],
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class_name:
        spec["storageClassName"] = cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(service),
        "spec": spec,
    }


def render_fill_job(service: TTSService) -> dict:
    runtime = service.spec.runtime
    token = service.spec.model.cache.hub_token_secret
    env = [
        {"name": "HF_HOME", "value": "/tmp/huggingface"},
        {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
    ]
    if token is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}},
            }
        )
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security.pod_security_context(),
        "containers": [
            {
                "name": FILL_CONTAINER,
                "image": runtime.image,
                "imagePullPolicy": runtime.image_pull_policy,
                "command": ["ttsfleet"],
                "args": [
                    "fetch",
                    service.spec.model.hub_id(),
                    "--revision",
                    cache_revision(service),
                    "--out",
                    PVC_MOUNT,
                ],
                "env": env,
                "resources": {
                    "requests": {"cpu": "1", "memory": "2Gi"},
                    "limits": {"memory": "4Gi"},
                },
                # The fetch's last lines say why it failed, in the pod's status.
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": pod_security.container_security_context(),
                "volumeMounts": [
                    {"name": "model", "mountPath": PVC_MOUNT},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }
        ],
        "volumes": [
            {"name": "model", "persistentVolumeClaim": {"claimName": cache_claim_name(service)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        ],
    }
    if runtime.service_account_name:
        pod_spec["serviceAccountName"] = runtime.service_account_name
    if runtime.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in runtime.image_pull_secrets]
    metadata = _metadata(service)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": FILL_BACKOFF_LIMIT,
            "podFailurePolicy": {
                "rules": [
                    # A node drained or preempted under the fill is no failure of the fill.
                    # `status` is required by API servers before 1.31 (defaulted to True after).
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": FILL_CONTAINER,
                            "operator": "In",
                            "values": [f.exit_code for f in model_cache.PERMANENT_FAILURES],
                        },
                    },
                ]
            },
            "template": {
                "metadata": {"labels": {**metadata["labels"], labels.NAME: labels.MODEL_CACHE_APP}},
                "spec": pod_spec,
            },
        },
    }
