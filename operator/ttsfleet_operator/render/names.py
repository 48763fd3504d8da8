"""Names of a TTSService's children, derived from the service name alone."""

from __future__ import annotations

from ttsfleet_operator import labels


def deployment_name(service_name: str, track: str, pool: str) -> str:
    """`<svc>-on-demand`, `<svc>-spot`; the canary track adds `-canary`."""
    if track == labels.STABLE:
        return f"{service_name}-{pool}"
    return f"{service_name}-{track}-{pool}"


def engine_config_name(service_name: str) -> str:
    return f"{service_name}-engine"


def service_name(service_name: str) -> str:
    """The Service shares the TTSService's name, so clients address `http://<name>:8000`."""
    return service_name


def endpoint(service_name: str, namespace: str, port: int) -> str:
    return f"http://{service_name}.{namespace}.svc:{port}"
