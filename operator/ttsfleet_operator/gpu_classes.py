"""The one table of GPU classes: class name -> node label value and memory.

Values are what NVIDIA GPU feature discovery writes in `nvidia.com/gpu.product`
(the local e2e cluster's fake nodes in e2e/cluster/nodes.yaml use the same).
A spec can override the product value for clouds that label differently.
"""

from __future__ import annotations

import dataclasses

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
# GPU nodes carry this NoSchedule taint (GKE, the NVIDIA GPU operator, our kwok nodes).
GPU_TAINT_KEY = "nvidia.com/gpu"


@dataclasses.dataclass(frozen=True)
class GpuClass:
    name: str
    product: str
    memory_gib: int


GPU_CLASSES: dict[str, GpuClass] = {
    entry.name: entry
    for entry in (
        GpuClass("h100", "NVIDIA-H100-80GB-HBM3", 80),
        GpuClass("h200", "NVIDIA-H200", 141),
        GpuClass("a100-80gb", "NVIDIA-A100-SXM4-80GB", 80),
        GpuClass("a100-40gb", "NVIDIA-A100-SXM4-40GB", 40),
        GpuClass("l40s", "NVIDIA-L40S", 48),
        GpuClass("l4", "NVIDIA-L4", 24),
        GpuClass("a10g", "NVIDIA-A10G", 24),
    )
}


def gpu_toleration() -> dict:
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
