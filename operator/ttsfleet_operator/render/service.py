"""The Service in front of every runtime pod of a TTSService (all pools, both tracks)."""

from __future__ import annotations

from ttsfleet_operator import labels
from ttsfleet_operator.render import names
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.tts_service import TTSService

HTTP_PORT = 8000
HTTP_PORT_NAME = "http"


def render_service(service: TTSService) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(service, names.service_name(service.name), "server"),
        "spec": {
            "type": "ClusterIP",
            "selector": labels.pod_selector(service.name),
            "ports": [
                {
                    "name": HTTP_PORT_NAME,
                    "port": HTTP_PORT,
                    "targetPort": HTTP_PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


def render_track_service(service: TTSService, track: str) -> dict:
    """`<svc>-stable` / `<svc>-canary`: one track's pods, the HTTPRoute's weighted backends."""
    main = render_service(service)
    return {
        **main,
        "metadata": child_metadata(
            service, names.track_service_name(service.name, track), "server", {labels.TRACK: track}
        ),
        "spec": {**main["spec"], "selector": labels.track_selector(service.name, track)},
    }
