"""The one replica splitter: how `spec.replicas` divides among the Deployments.

Today: on-demand vs spot for the stable track. The canary track (a later issue)
takes its share first and is split the same way.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class ReplicaSplit:
    on_demand: int
    spot: int

    @property
    def total(self) -> int:
        return self.on_demand + self.spot


def split_replicas(replicas: int, spot_ratio: float, min_on_demand: int) -> ReplicaSplit:
    """Divide `replicas` between on-demand and spot capacity.

    Spot gets round(replicas * ratio), rounding half down so a ratio of 0.5 on an
    odd count favours the pool that is not preempted; then on-demand is raised
    to the floor `min_on_demand` (never above `replicas`) at spot's expense.
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    if not 0.0 <= spot_ratio <= 1.0:
        raise ValueError(f"spot ratio must be in [0, 1], got {spot_ratio}")
    spot = math.ceil(replicas * spot_ratio - 0.5)
    spot = max(0, min(spot, replicas - min(min_on_demand, replicas)))
    return ReplicaSplit(on_demand=replicas - spot, spot=spot)
