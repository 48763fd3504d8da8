"""Everything a TTSService becomes, in apply order."""

from __future__ import annotations

import dataclasses

from ttsfleet_operator import labels
from ttsfleet_operator.render.configmap import render_configmap
from ttsfleet_operator.render.deployment import render_deployment
from ttsfleet_operator.render.hpa import render_hpa
from ttsfleet_operator.render.httproute import render_httproute
from ttsfleet_operator.render.model_cache import (
    cache_claim_name,
    render_cache_claim,
    render_fill_job,
)
from ttsfleet_operator.render.model_source import uses_cache
from ttsfleet_operator.render.pdb import render_pdb
from ttsfleet_operator.render.prewarm import render_prewarm
from ttsfleet_operator.render.service import render_service, render_track_service
from ttsfleet_operator.replicas import ReplicaSplit, split_replicas
from ttsfleet_operator.tts_service import TTSService


@dataclasses.dataclass(frozen=True)
class Tracks:
    """What each track serves, from the canary state machine (canary/plan.py).

    `stable` and `candidate` are the TTSService as each track serves it (image,
    model revision); no candidate means no canary Deployments. `weight` is the
    candidate's traffic share; 0 with a candidate keeps its Deployments at 0
    pods (rolled back). `gateway` adds the track Services and the HTTPRoute.
    With model.cache, `model_claim` is the cache both tracks' pods mount; None means
    none is Ready yet, and no runtime Deployment is rendered.
    """

    stable: TTSService
    candidate: TTSService | None = None
    weight: int = 0
    gateway: bool = False
    model_claim: str | None = None


def fleet_split(service: TTSService, weight: int = 0) -> ReplicaSplit:
    spot = service.spec.spot
    return split_replicas(
        service.spec.replicas, spot.ratio, spot.min_on_demand, canary_weight=weight
    )


def pools(service: TTSService) -> list[str]:
    """Pools that can ever hold replicas. A pool at 0 for now keeps its Deployment
    (the HPA may grow it back); a pool the spec rules out entirely is not rendered."""
    spot = service.spec.spot
    result = []
    if spot.ratio < 1.0 or spot.min_on_demand > 0:
        result.append(labels.ON_DEMAND)
    if spot.ratio > 0.0:
        result.append(labels.SPOT)
    return result


def render_fleet(service: TTSService, tracks: Tracks | None = None) -> list[dict]:
    """ConfigMaps and the model cache first (pods mount them), then Deployments, Services,
    route, PDB, HPA.

    Without `tracks`, the spec's stable track alone, its pods mounting the cache the spec
    asks for (what `ttsfleet render` shows: the fleet once that cache is Ready).
    """
    cached = uses_cache(service)
    tracks = tracks or Tracks(
        stable=service, model_claim=cache_claim_name(service) if cached else None
    )
    split = fleet_split(service, tracks.weight if tracks.candidate is not None else 0)
    stable_pods = {labels.ON_DEMAND: split.on_demand, labels.SPOT: split.spot}
    canary_pods = {labels.ON_DEMAND: split.canary_on_demand, labels.SPOT: split.canary_spot}

    manifests = [render_configmap(tracks.stable)]
    if tracks.candidate is not None:
        manifests.append(render_configmap(tracks.candidate, labels.CANARY))
    if cached:
        manifests += [render_cache_claim(service), render_fill_job(service)]
    if not cached or tracks.model_claim is not None:
        claim = tracks.model_claim
        manifests += [
            render_deployment(tracks.stable, labels.STABLE, pool, stable_pods[pool], claim)
            for pool in pools(service)
        ]
        if tracks.candidate is not None:
            manifests += [
                render_deployment(tracks.candidate, labels.CANARY, pool, canary_pods[pool], claim)
                for pool in pools(service)
            ]
    if cached and tracks.model_claim is not None and service.spec.model.cache.prewarm != "None":
        manifests.append(render_prewarm(service, tracks.model_claim))
    manifests.append(render_service(service))
    if tracks.gateway:
        manifests += [
            render_track_service(service, track) for track in (labels.STABLE, labels.CANARY)
        ]
        manifests.append(
            render_httproute(service, tracks.weight if tracks.candidate is not None else 0)
        )
    manifests.append(render_pdb(service))
    if service.spec.autoscaling.enabled:
        manifests.append(render_hpa(service))
    return manifests
