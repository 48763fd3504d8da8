"""The kinds of object a TTSService's children are: the one list of them.

The reconciler lists these to find stale children, the API client maps them to
URL paths, the watches keep the cache the lists are answered from (child_cache.py),
and the chart's RBAC (tests/chart) grants exactly these verbs on exactly these resources.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ChildKind:
    api_version: str
    kind: str
    plural: str
    # Listed only where the cluster serves the kind (discovery), like Gateway API's HTTPRoute.
    optional: bool = False
    # Watched (the chart grants `watch`): its lists come from the cache the watch keeps
    # (child_cache.py), and its deletion asks for a pass of the owner (child_watch.py).
    watched: bool = True
    # The owner's status reads this kind's status (status.py, model_cache.py): a change of
    # it asks for a pass of the owner too.
    status_read: bool = False

    @property
    def group(self) -> str:
        """The API group ("" for the core group), as RBAC rules and kopf name it."""
        return self.api_version.split("/")[0] if "/" in self.api_version else ""

    @property
    def version(self) -> str:
        return self.api_version.split("/")[-1]


CONFIG_MAP = ChildKind("v1", "ConfigMap", "configmaps")
DEPLOYMENT = ChildKind("apps/v1", "Deployment", "deployments", status_read=True)
# The model cache (model_cache.py): watched, so a fill that completes or fails, or a claim
# that binds or is deleted, shows in the status (and moves the pods) within seconds.
PERSISTENT_VOLUME_CLAIM = ChildKind(
    "v1", "PersistentVolumeClaim", "persistentvolumeclaims", status_read=True
)
JOB = ChildKind("batch/v1", "Job", "jobs", status_read=True)
# Reads the model cache into each GPU node's page cache (model.cache.prewarm).
DAEMON_SET = ChildKind("apps/v1", "DaemonSet", "daemonsets")
SERVICE = ChildKind("v1", "Service", "services")
POD_DISRUPTION_BUDGET = ChildKind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
HORIZONTAL_POD_AUTOSCALER = ChildKind(
    "autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"
)
# Not watched: a watch on a kind the cluster does not serve would fail; listed each pass
# where it is served.
HTTP_ROUTE = ChildKind(
    "gateway.networking.k8s.io/v1", "HTTPRoute", "httproutes", optional=True, watched=False
)

# Every kind the operator may create, in the order a pass lists them (and so deletes
# stale children): what pods mount (ConfigMaps, the model cache) before their Deployments,
# the optional kind last.
ALL: tuple[ChildKind, ...] = (
    CONFIG_MAP,
    PERSISTENT_VOLUME_CLAIM,
    JOB,
    DEPLOYMENT,
    DAEMON_SET,
    SERVICE,
    POD_DISRUPTION_BUDGET,
    HORIZONTAL_POD_AUTOSCALER,
    HTTP_ROUTE,
)
# The kinds whose events the operator watches, and so answers lists of from memory.
WATCHED: tuple[ChildKind, ...] = tuple(kind for kind in ALL if kind.watched)
CACHED = WATCHED

# Created once (a 409 says it exists), then never read, patched or deleted (garbage
# collection follows the ownerReference), so not in ALL: the generated API keys
# Secret. RBAC: create only; get cannot be limited to metadata and would read every Secret.
API_KEYS_SECRET = ChildKind("v1", "Secret", "secrets", watched=False)
CREATED_ONCE: tuple[ChildKind, ...] = (API_KEYS_SECRET,)
