"""Everything a TTSService becomes, in apply order."""

from __future__ import annotations

from ttsfleet_operator import labels
from ttsfleet_operator.render.configmap import render_configmap
from ttsfleet_operator.render.deployment import render_deployment
from ttsfleet_operator.render.hpa import render_hpa
from ttsfleet_operator.render.pdb import render_pdb
from ttsfleet_operator.render.service import render_service
from ttsfleet_operator.replicas import ReplicaSplit, split_replicas
from ttsfleet_operator.tts_service import TTSService


def stable_split(service: TTSService) -> ReplicaSplit:
    spot = service.spec.spot
    return split_replicas(service.spec.replicas, spot.ratio, spot.min_on_demand)


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


def render_fleet(service: TTSService) -> list[dict]:
    """ConfigMap first (pods mount it), then Deployments, Service, PDB, HPA."""
    split = stable_split(service)
    per_pool = {labels.ON_DEMAND: split.on_demand, labels.SPOT: split.spot}
    manifests = [render_configmap(service)]
    manifests += [render_deployment(service, labels.STABLE, pool, per_pool[pool]) for pool in pools(service)]
    manifests += [render_service(service), render_pdb(service)]
    if service.spec.autoscaling.enabled:
        manifests.append(render_hpa(service))
    return manifests
