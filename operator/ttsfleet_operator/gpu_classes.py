"""The one table of GPU classes: class name -> node label value and memory, and the
measured start-up of a runtime pod per class and model size (the startupProbe budget).

Values are what NVIDIA GPU feature discovery writes in `nvidia.com/gpu.product`
(the local e2e cluster's fake nodes in e2e/cluster/nodes.yaml use the same).
A spec can override the product value for clouds that label differently.

One class has no GPU: `cpu`, for development and CI clusters (the local cluster's real
node). Its pods serve with `--device cpu`, ask for no GPU, and go to nodes set aside for
CPU serving: labelled and tainted `ttsfleet.io/cpu-serving`, as GPU nodes carry the
product label and the `nvidia.com/gpu` taint.
"""

from __future__ import annotations

import dataclasses

PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
# GPU nodes carry this NoSchedule taint (GKE, the NVIDIA GPU operator, our kwok nodes).
GPU_TAINT_KEY = "nvidia.com/gpu"
CPU_CLASS = "cpu"
# Nodes for CPU serving carry this label (value "true") and a NoSchedule taint of the same key.
CPU_SERVING_KEY = "ttsfleet.io/cpu-serving"


@dataclasses.dataclass(frozen=True)
class GpuClass:
    name: str
    # The nvidia.com/gpu.product value; None for the class without a GPU.
    product: str | None
    memory_gib: int

    @property
    def has_gpu(self) -> bool:
        return self.product is not None


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
        GpuClass(CPU_CLASS, None, 0),
    )
}


def has_gpu(class_name: str) -> bool:
    return GPU_CLASSES[class_name].has_gpu


def node_selector(class_name: str, product_override: str | None = None) -> dict[str, str]:
    """The labels a node of this class carries."""
    if not has_gpu(class_name):
        return {CPU_SERVING_KEY: "true"}
    return {PRODUCT_LABEL: product_override or GPU_CLASSES[class_name].product}


def class_toleration(class_name: str) -> dict:
    """The taint nodes of this class carry, tolerated."""
    key = GPU_TAINT_KEY if has_gpu(class_name) else CPU_SERVING_KEY
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


# Process start -> ready (load, compile, CUDA graph capture) from a checkpoint on local
# disk, seconds, the slowest run measured: (GPU class, model size) -> seconds. Update
# from the committed start-up benchmarks; a pair not measured takes the slowest figure here.
MEASURED_STARTUP_SECONDS: dict[tuple[str, str], int] = {
    # bench/results/startup.json, an empty compile cache (a
    # fleet's first pod: 44.2 and 43.9 s, rounded up); with a warm one (the cache volume)
    # the sizes were ready in 8.0 and 6.4 s.
    ("h100", "1.7B"): 45,
    ("h100", "0.6B"): 44,
}
# The budget doubles the measurement (a busy node, a cold page cache), and adds this
# for pods that download the checkpoint themselves (no model cache): ~4.5 GB at ~10 MB/s.
STARTUP_MARGIN_FACTOR = 2
DOWNLOAD_ALLOWANCE_SECONDS = 600


def startup_budget_seconds(gpu_class: str, size: str, downloads: bool) -> int:
    """How long a pod may take to become ready before its startupProbe gives up."""
    measured = MEASURED_STARTUP_SECONDS.get(
        (gpu_class, size), max(MEASURED_STARTUP_SECONDS.values())
    )
    return measured * STARTUP_MARGIN_FACTOR + (DOWNLOAD_ALLOWANCE_SECONDS if downloads else 0)
