"""Names of a TTSService's children, derived from the service name alone."""

from __future__ import annotations

from ttsfleet_operator import labels


def deployment_name(service_name: str, track: str, pool: str) -> str:
    """`<svc>-on-demand`, `<svc>-spot`; the canary track adds `-canary`."""
    if track == labels.STABLE:
        return f"{service_name}-{pool}"
    return f"{service_name}-{track}-{pool}"


def engine_config_name(service_name: str, track: str = labels.STABLE) -> str:
    """`<svc>-engine`; the canary's settings (its model revision) in `<svc>-canary-engine`."""
    if track == labels.STABLE:
        return f"{service_name}-engine"
    return f"{service_name}-{track}-engine"


def track_service_name(service_name: str, track: str) -> str:
    """`<svc>-stable`, `<svc>-canary`: the HTTPRoute's backends (Gateway API traffic split)."""
    return f"{service_name}-{track}"


def api_keys_secret_name(service_name: str) -> str:
    """`<svc>-api-keys`: the Secret the operator creates when the spec names none."""
    return f"{service_name}-api-keys"


def model_cache_name(service_name: str, key: str) -> str:
    """`<svc>-model-<key>`: the cache PVC and the Job that fills it; `key` names what it holds."""
    return f"{service_name}-model-{key}"


def route_name(service_name: str) -> str:
    return service_name


def service_name(service_name: str) -> str:
    """The Service shares the TTSService's name, so clients address `http://<name>:8000`."""
    return service_name


def endpoint(service_name: str, namespace: str, port: int) -> str:
    return f"http://{service_name}.{namespace}.svc:{port}"
