"""The Gateway API HTTPRoute that splits traffic between the stable and canary Services by weight.

Rendered only where the cluster serves Gateway API (or the spec asks for it).
Its parent is `canary.gateway`, or else the TTSService's own Service: a GAMMA
mesh then applies the weights to in-cluster callers of that Service.
"""

from __future__ import annotations

from ttsfleet_operator import child_kinds, labels
from ttsfleet_operator.render import names
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.render.service import HTTP_PORT
from ttsfleet_operator.tts_service import TTSService

API_VERSION = child_kinds.HTTP_ROUTE.api_version
KIND = child_kinds.HTTP_ROUTE.kind


def _parent_ref(service: TTSService) -> dict:
    gateway = service.spec.canary.gateway if service.spec.canary else None
    if gateway is None:
        return {
            "group": "",
            "kind": "Service",
            "name": names.service_name(service.name),
            "port": HTTP_PORT,
        }
    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway.name}
    if gateway.namespace:
        ref["namespace"] = gateway.namespace
    if gateway.section_name:
        ref["sectionName"] = gateway.section_name
    return ref


def render_httproute(service: TTSService, canary_weight: int) -> dict:
    backends = [
        (labels.STABLE, 100 - canary_weight),
        (labels.CANARY, canary_weight),
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": child_metadata(service, names.route_name(service.name), "router"),
        "spec": {
            "parentRefs": [_parent_ref(service)],
            "rules": [
                {
                    "backendRefs": [
                        {
                            "group": "",
                            "kind": "Service",
                            "name": names.track_service_name(service.name, track),
                            "port": HTTP_PORT,
                            "weight": weight,
                        }
                        for track, weight in backends
                    ]
                }
            ],
        },
    }
