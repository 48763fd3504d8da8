"""From the rollout's status to what gets rendered: which candidate, at which weight, routed how."""

from __future__ import annotations

from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.canary.tracks import candidate_revision, candidate_service, stable_service
from ttsfleet_operator.render.fleet import Tracks
from ttsfleet_operator.tts_service import CanaryStatus, TTSService

# Phases whose candidate still has Deployments: at its weight, or at 0 pods once rolled back.
CANDIDATE_RENDERED = (sm.PROGRESSING, sm.PAUSED, sm.PROMOTING, sm.ROLLED_BACK)


def uses_gateway(service: TTSService, cluster_has_gateway_api: bool) -> bool:
    canary = service.spec.canary
    if canary is None:
        return False
    if canary.traffic == "GatewayAPI":
        return True
    return canary.traffic == "Auto" and cluster_has_gateway_api


def plan(
    service: TTSService, canary: CanaryStatus | None, cluster_has_gateway_api: bool = False
) -> Tracks:
    stable = stable_service(service, canary)
    gateway = uses_gateway(service, cluster_has_gateway_api)
    revision = candidate_revision(service)
    if (
        canary is None
        or revision is None
        or canary.revision != revision
        or canary.phase not in CANDIDATE_RENDERED
    ):
        return Tracks(stable=stable, gateway=gateway)
    return Tracks(
        stable=stable, candidate=candidate_service(service), weight=canary.weight, gateway=gateway
    )
