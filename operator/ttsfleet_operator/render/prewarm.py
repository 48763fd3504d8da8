"""Node-local pre-warming of the model cache (`model.cache.prewarm: PageCache`).

A DaemonSet on every node of the service's GPU class (either pool, so a node the HPA
or a spot replacement lands on next is warm already) mounts the serving cache
read-only and reads the checkpoint once: the node's page cache then holds it, and a
runtime pod starting there loads its weights from memory instead of the network
volume. Hence ReadWriteMany only: the one volume is mounted on every such node.

The pod sets no memory limit on purpose: the pages it reads are charged to its cgroup,
and a limit would evict them as fast as it reads them. Its template names the claim,
so a new revision's cache rolls it, and the new checkpoint is read in turn.
"""

from __future__ import annotations

from ttsfleet_operator import labels
from ttsfleet_operator.render import pod_security, scheduling
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.render.model_source import PVC_MOUNT
from ttsfleet_operator.tts_service import TTSService
from ttsfleet_runtime import model_cache

COMPONENT = "model-prewarm"
# Read every file of the checkpoint once, then stay (a DaemonSet's pods run for good).
# `-H`: the checkpoint is the fill's link to its folder (model_cache); find follows that
# one link, named on its command line, and none inside.
WARM_SCRIPT = (
    f"find -H {PVC_MOUNT}/{model_cache.CHECKPOINT_DIR} -type f -exec cat {{}} + > /dev/null"
    " && echo 'checkpoint read into the page cache' && exec sleep infinity"
)


def prewarm_name(service_name: str) -> str:
    return f"{service_name}-model-prewarm"


def render_prewarm(service: TTSService, claim: str) -> dict:
    runtime = service.spec.runtime
    metadata = child_metadata(service, prewarm_name(service.name), COMPONENT)
    pod_labels = {**metadata["labels"], labels.NAME: labels.MODEL_CACHE_APP}
    selector = {key: pod_labels[key] for key in (labels.NAME, labels.SERVICE, labels.COMPONENT)}
    pod_spec = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security.pod_security_context(),
        "nodeSelector": scheduling.class_node_selector(service),
        # Every node of the class, on-demand or spot.
        "tolerations": scheduling.tolerations(service, labels.SPOT),
        "containers": [
            {
                "name": "prewarm",
                "image": runtime.image,
                "imagePullPolicy": runtime.image_pull_policy,
                "command": ["sh", "-c", WARM_SCRIPT],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                "securityContext": pod_security.container_security_context(),
                "volumeMounts": [{"name": "model", "mountPath": PVC_MOUNT, "readOnly": True}],
            }
        ],
        "volumes": [
            {"name": "model", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        ],
    }
    if runtime.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in runtime.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
