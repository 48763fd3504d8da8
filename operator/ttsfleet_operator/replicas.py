"""The one replica splitter: how `spec.replicas` divides among the Deployments.

The canary track takes its share of `spec.replicas` first (by its traffic
weight); each track is then divided between on-demand and spot capacity, and
the on-demand floor holds over the whole fleet, stable pods counted first.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class ReplicaSplit:
    """Pods per pool. `on_demand` and `spot` are the stable track; `canary_*` the candidate's."""

    on_demand: int
    spot: int
    canary_on_demand: int = 0
    canary_spot: int = 0

    @property
    def stable(self) -> int:
        return self.on_demand + self.spot

    @property
    def canary(self) -> int:
        return self.canary_on_demand + self.canary_spot

    @property
    def total(self) -> int:
        return self.stable + self.canary


def _round_half_down(value: float) -> int:
    return math.ceil(value - 0.5)


def _pools(replicas: int, spot_ratio: float, floor: int) -> tuple[int, int]:
    spot = _round_half_down(replicas * spot_ratio)
    spot = max(0, min(spot, replicas - on_demand_floor(replicas, floor)))
    return replicas - spot, spot


def canary_replicas(replicas: int, weight: int) -> int:
    """Pods of the candidate at `weight` percent: the share rounded, at least one
    while the weight is above 0, and never all of them (stable keeps one) once
    there are two. A fleet of one gets a candidate pod on top (a surge of one):
    a canary cannot take a share of a single pod."""
    if replicas <= 0 or weight <= 0:
        return 0
    if replicas == 1:
        return 1
    return min(max(1, _round_half_down(replicas * weight / 100)), replicas - 1)


def on_demand_floor(replicas: int, min_on_demand: int) -> int:
    """Ready on-demand pods a service should never go below: `minOnDemand`, capped at `replicas`."""
    return min(min_on_demand, replicas)


def split_replicas(
    replicas: int, spot_ratio: float, min_on_demand: int, canary_weight: int = 0
) -> ReplicaSplit:
    """Divide `replicas` between tracks and between on-demand and spot capacity.

    Spot gets round(n * ratio) of each track, rounding half down so a ratio of
    0.5 on an odd count favours the pool that is not preempted; then on-demand
    is raised to the floor `min_on_demand` (never above the pods there are) at
    spot's expense: the stable track first, the canary for what is left.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    if not 0.0 <= spot_ratio <= 1.0:
        raise ValueError(f"spot ratio must be in [0, 1], got {spot_ratio}")
    if not 0 <= canary_weight <= 100:
        raise ValueError(f"canary weight must be in [0, 100], got {canary_weight}")
    canary = canary_replicas(replicas, canary_weight)
    stable = replicas - canary if replicas > 1 else replicas
    on_demand, spot = _pools(stable, spot_ratio, min_on_demand)
    canary_on_demand, canary_spot = _pools(canary, spot_ratio, max(0, min_on_demand - on_demand))
    return ReplicaSplit(on_demand, spot, canary_on_demand, canary_spot)
