"""Which configuration the small-batch product of kernels/linear.py runs an (m, n, k)
product with, and whether it runs it at all: the table measured on the GPU (data), the
bucket of a batch size, a default for shapes the table does not know, and the rule
against cuBLAS (`beats_cublas`), which the fused operations (model/ops.py) consult per
call. fp8 weights (e4m3 codes, model/fp8.py) have their own table (`FP8_TABLE`) and
their own rule (`fp8_scaled_mm_wins`: the kernel up to a few rows, torch._scaled_mm
with the input quantized from the FP8_SCALED_MM_FROM bucket on). No Triton here: the tables
are read on the host when a graph is captured.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# Batch sizes are rounded up to one of these to pick a configuration.
M_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class LinearConfig:
    variant: str  # "gemv" (CUDA cores, small M) or "dot" (tensor cores)
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 1

    def __post_init__(self):
        if self.variant not in ("gemv", "dot"):
            raise ValueError(f"variant must be 'gemv' or 'dot', not {self.variant!r}")
        for name in ("block_m", "block_n", "block_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, not {value}")
        if self.variant == "dot" and min(self.block_m, self.block_n, self.block_k) < 16:
            raise ValueError("tl.dot needs block_m, block_n and block_k >= 16")


# (M bucket, N, K) -> (variant, block_m, block_n, block_k, num_warps, num_stages), written by
# bench/kernel_linear.py on the H100 (its --out/linear_table.py is pasted here; the script
# and its results are at commit 7d79071: bench/results/h100-2026-11-23-kernel_linear.json).
# Measured on an H100 80GB HBM3 (torch 2.11, triton 3.6), 2026-11-23: kept are the
# buckets where the fused kernel beat cuBLAS + the compiled elementwise kernels by 3% or more.
# Comments: ours, then the composition.
TABLE: dict[tuple[int, int, int], tuple[str, int, int, int, int, int]] = {
    (1, 1024, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # predictor / 0.6B o: 4.6 us, 920 GB/s; composition 7.7 us, cuBLAS alone 6.3
    (1, 1024, 3072): (
        "gemv",
        1,
        8,
        1024,
        8,
        1,
    ),  # predictor / 0.6B down: 6.3 us, 1002 GB/s; composition 9.3 us, cuBLAS alone 7.1
    (1, 2048, 1024): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # predictor lm_head: 3.9 us, 1082 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (1, 2048, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B talker o: 5.5 us, 1515 GB/s; composition 7.9 us, cuBLAS alone 6.5
    (1, 2048, 6144): (
        "gemv",
        1,
        8,
        1024,
        8,
        1,
    ),  # 1.7B talker down: 12.7 us, 1984 GB/s; composition 14.9 us, cuBLAS alone 12.8
    (1, 3072, 1024): (
        "gemv",
        1,
        4,
        512,
        4,
        1,
    ),  # 0.6B codec_head: 4.7 us, 1327 GB/s; composition 5.5 us, cuBLAS alone 5.6
    (1, 3072, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B codec_head: 7.0 us, 1801 GB/s; composition 7.7 us, cuBLAS alone 7.7
    (1, 4096, 1024): (
        "gemv",
        1,
        8,
        512,
        4,
        1,
    ),  # predictor / 0.6B qkv: 6.2 us, 1349 GB/s; composition 8.1 us, cuBLAS alone 5.9
    (1, 4096, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B talker qkv: 8.9 us, 1895 GB/s; composition 10.5 us, cuBLAS alone 8.7
    (1, 6144, 1024): (
        "gemv",
        1,
        16,
        256,
        4,
        1,
    ),  # predictor / 0.6B gate_up: 7.6 us, 1652 GB/s; composition 9.6 us, cuBLAS alone 7.5
    (1, 12288, 2048): (
        "gemv",
        1,
        16,
        256,
        4,
        1,
    ),  # 1.7B talker gate_up: 20.0 us, 2522 GB/s; composition 22.2 us, cuBLAS alone 20.3
    (2, 1024, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # predictor / 0.6B o: 4.5 us, 939 GB/s; composition 7.6 us, cuBLAS alone 6.0
    (2, 1024, 3072): (
        "gemv",
        1,
        8,
        1024,
        8,
        1,
    ),  # predictor / 0.6B down: 6.5 us, 972 GB/s; composition 9.7 us, cuBLAS alone 7.3
    (2, 2048, 1024): (
        "gemv",
        1,
        4,
        512,
        4,
        1,
    ),  # predictor lm_head: 4.3 us, 981 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (2, 2048, 2048): (
        "gemv",
        1,
        4,
        1024,
        4,
        1,
    ),  # 1.7B talker o: 6.1 us, 1374 GB/s; composition 8.0 us, cuBLAS alone 6.5
    (2, 3072, 1024): (
        "gemv",
        2,
        4,
        512,
        4,
        1,
    ),  # 0.6B codec_head: 5.2 us, 1202 GB/s; composition 5.5 us, cuBLAS alone 5.6
    (2, 4096, 1024): (
        "gemv",
        1,
        16,
        256,
        8,
        1,
    ),  # predictor / 0.6B qkv: 6.5 us, 1288 GB/s; composition 8.4 us, cuBLAS alone 5.8
    (2, 4096, 2048): (
        "gemv",
        2,
        4,
        512,
        4,
        1,
    ),  # 1.7B talker qkv: 10.1 us, 1671 GB/s; composition 11.3 us, cuBLAS alone 8.7
    (2, 6144, 1024): (
        "gemv",
        1,
        16,
        256,
        4,
        1,
    ),  # predictor / 0.6B gate_up: 8.0 us, 1576 GB/s; composition 10.1 us, cuBLAS alone 7.4
    (2, 12288, 2048): (
        "dot",
        16,
        128,
        128,
        8,
        3,
    ),  # 1.7B talker gate_up: 21.8 us, 2312 GB/s; composition 22.6 us, cuBLAS alone 20.2
    (4, 1024, 2048): (
        "gemv",
        2,
        4,
        1024,
        4,
        1,
    ),  # predictor / 0.6B o: 5.5 us, 767 GB/s; composition 7.5 us, cuBLAS alone 6.0
    (4, 1024, 3072): (
        "gemv",
        2,
        8,
        1024,
        8,
        1,
    ),  # predictor / 0.6B down: 8.6 us, 741 GB/s; composition 9.7 us, cuBLAS alone 7.3
    (4, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 887 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (4, 2048, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.2 us, 1175 GB/s; composition 8.0 us, cuBLAS alone 6.6
    (4, 3072, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # 0.6B codec_head: 5.4 us, 1175 GB/s; composition 5.6 us, cuBLAS alone 5.6
    (4, 6144, 1024): (
        "dot",
        16,
        32,
        256,
        4,
        3,
    ),  # predictor / 0.6B gate_up: 9.0 us, 1398 GB/s; composition 10.1 us, cuBLAS alone 7.4
    (4, 12288, 2048): (
        "dot",
        16,
        128,
        128,
        8,
        3,
    ),  # 1.7B talker gate_up: 22.0 us, 2296 GB/s; composition 23.2 us, cuBLAS alone 20.5
    (8, 1024, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.5 us, 655 GB/s; composition 7.5 us, cuBLAS alone 6.0
    (8, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 882 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (8, 2048, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.2 us, 1176 GB/s; composition 8.0 us, cuBLAS alone 6.5
    (8, 3072, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # 0.6B codec_head: 5.4 us, 1186 GB/s; composition 5.6 us, cuBLAS alone 5.7
    (8, 4096, 1024): (
        "dot",
        16,
        32,
        256,
        4,
        3,
    ),  # predictor / 0.6B qkv: 7.4 us, 1145 GB/s; composition 8.5 us, cuBLAS alone 5.9
    (8, 6144, 1024): (
        "dot",
        16,
        32,
        256,
        4,
        3,
    ),  # predictor / 0.6B gate_up: 8.9 us, 1420 GB/s; composition 10.0 us, cuBLAS alone 7.3
    (16, 1024, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.6 us, 656 GB/s; composition 7.5 us, cuBLAS alone 6.1
    (16, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 901 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (16, 2048, 2048): (
        "dot",
        16,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.2 us, 1191 GB/s; composition 8.0 us, cuBLAS alone 6.5
    (16, 3072, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # 0.6B codec_head: 5.3 us, 1206 GB/s; composition 5.5 us, cuBLAS alone 5.6
    (32, 1024, 2048): (
        "dot",
        32,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.3 us, 707 GB/s; composition 7.4 us, cuBLAS alone 6.0
    (32, 2048, 1024): (
        "dot",
        16,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.8 us, 910 GB/s; composition 5.0 us, cuBLAS alone 5.0
    (32, 2048, 2048): (
        "dot",
        32,
        16,
        256,
        4,
        4,
    ),  # 1.7B talker o: 7.0 us, 1247 GB/s; composition 8.1 us, cuBLAS alone 6.6
    (64, 1024, 2048): (
        "dot",
        32,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.4 us, 739 GB/s; composition 7.5 us, cuBLAS alone 6.0
    (64, 2048, 1024): (
        "dot",
        64,
        32,
        128,
        4,
        4,
    ),  # predictor lm_head: 4.9 us, 934 GB/s; composition 5.1 us, cuBLAS alone 5.1
    (64, 2048, 2048): (
        "dot",
        64,
        32,
        128,
        4,
        4,
    ),  # 1.7B talker o: 7.9 us, 1168 GB/s; composition 8.3 us, cuBLAS alone 6.7
    (128, 1024, 2048): (
        "dot",
        64,
        16,
        256,
        4,
        4,
    ),  # predictor / 0.6B o: 6.7 us, 784 GB/s; composition 8.0 us, cuBLAS alone 6.1
    (128, 2048, 2048): (
        "dot",
        64,
        32,
        128,
        4,
        4,
    ),  # 1.7B talker o: 8.0 us, 1246 GB/s; composition 8.6 us, cuBLAS alone 6.9
}


# fp8 codes (W8A16: e4m3 weight tiles widened in registers, bf16 activations): the same
# kernel and key as TABLE, for the buckets where the kernel runs (below
# FP8_SCALED_MM_FROM). A 16-byte load holds twice the K of a bf16 one, so the sweep's
# GEMV tiles start at block_k 1024. Swept on an H200 (torch 2.11, triton 3.6),
# 2026-11-28, by `bench/fp8_kernel.py --sweep --sweep-ms 1,2,4` (its fp8_table.py pasted
# here; bench/results/fp8-kernel-h200.json). Comment: the matrix, its time a call.
FP8_TABLE: dict[tuple[int, int, int], tuple[str, int, int, int, int, int]] = {
    (1, 1024, 2048): ("gemv", 1, 4, 2048, 8, 1),  # predictor.o: 2.8 us
    (1, 1024, 3072): ("gemv", 1, 4, 1024, 8, 1),  # predictor.down: 3.9 us
    (1, 2048, 2048): ("gemv", 1, 8, 2048, 8, 1),  # talker.o: 3.2 us
    (1, 2048, 6144): ("gemv", 1, 8, 2048, 8, 1),  # talker.down: 6.1 us
    (1, 4096, 1024): ("gemv", 1, 16, 1024, 8, 1),  # predictor.qkv: 3.8 us
    (1, 4096, 2048): ("gemv", 1, 16, 1024, 4, 1),  # talker.qkv: 4.9 us
    (1, 6144, 1024): ("gemv", 1, 16, 1024, 4, 1),  # predictor.gate_up: 4.5 us
    (1, 12288, 2048): ("gemv", 1, 16, 1024, 4, 1),  # talker.gate_up: 9.4 us
    (2, 1024, 2048): ("gemv", 1, 8, 2048, 8, 1),  # predictor.o: 3.1 us
    (2, 1024, 3072): ("gemv", 1, 8, 1024, 8, 1),  # predictor.down: 4.4 us
    (2, 2048, 2048): ("gemv", 1, 8, 1024, 4, 1),  # talker.o: 4.0 us
    (2, 2048, 6144): ("gemv", 1, 16, 2048, 4, 1),  # talker.down: 9.1 us
    (2, 4096, 1024): ("gemv", 2, 16, 1024, 4, 1),  # predictor.qkv: 4.5 us
    (2, 4096, 2048): ("gemv", 2, 16, 1024, 4, 1),  # talker.qkv: 6.1 us
    (2, 6144, 1024): ("gemv", 2, 8, 1024, 4, 1),  # predictor.gate_up: 6.4 us
    (2, 12288, 2048): ("gemv", 2, 16, 1024, 4, 1),  # talker.gate_up: 13.8 us
    (4, 1024, 2048): ("gemv", 2, 8, 2048, 4, 1),  # predictor.o: 4.0 us
    (4, 1024, 3072): ("gemv", 2, 8, 1024, 4, 1),  # predictor.down: 6.7 us
    (4, 2048, 2048): ("gemv", 2, 16, 1024, 4, 1),  # talker.o: 5.2 us
    (4, 2048, 6144): ("gemv", 2, 16, 1024, 8, 1),  # talker.down: 14.1 us
    (4, 4096, 1024): ("gemv", 4, 16, 1024, 4, 1),  # predictor.qkv: 5.9 us
    (4, 4096, 2048): ("gemv", 4, 16, 1024, 4, 1),  # talker.qkv: 8.8 us
    (4, 6144, 1024): ("gemv", 4, 8, 1024, 4, 1),  # predictor.gate_up: 8.6 us
    (4, 12288, 2048): ("gemv", 4, 16, 1024, 4, 1),  # talker.gate_up: 21.7 us
}

# From this batch bucket on (8: from 5 rows), fp8 products run torch._scaled_mm (the input quantized per
# row by kernels/fp8_quantize.py, fp8 tensor cores) instead of the kernel; prefill (past
# the largest bucket) too. Measured on an H200 (torch 2.11, triton 3.6), 2026-11-28, by
# bench/fp8_kernel.py (bench/results/fp8-kernel-h200.json): at 1 row the kernel beat
# bf16 on 7 of the 8 1.7B matrices (talker gate_up 9.3 vs 13.0 us, down 6.1 vs 8.2) and
# _scaled_mm on all (10.7-24.8 us); from 8 rows the kernel, its best swept tile too, lost
# to _scaled_mm on every matrix (talker down at 8 rows: 27.3 vs 24.9 us; at 128 rows
# 107.6 vs 25.8): the widened codes do not feed Hopper's pipelined wgmma as bf16 tiles do.
# At 4 rows the swept kernel beat _scaled_mm on 7 of 8 (75 against 108 us for the eight).
FP8_SCALED_MM_FROM = 8


def m_bucket(m: int) -> int:
    """The smallest bucket >= m (the largest bucket for bigger m)."""
    for bucket in M_BUCKETS:
        if m <= bucket:
            return bucket
    return M_BUCKETS[-1]


def default_config(m: int, n: int, k: int, fp8: bool = False) -> LinearConfig:
    """A safe choice for shapes the table does not know (`fp8`: e4m3 weight codes)."""
    bucket = m_bucket(m)
    if bucket <= 8:
        # Small N gets narrow blocks so that every SM has programs to run; an fp8 tile
        # twice as wide in K reads the bytes of a bf16 one.
        return LinearConfig("gemv", bucket, 8 if n >= 2048 else 4, 1024 if fp8 else 512)
    return LinearConfig("dot", min(bucket, 64), 64, 128, num_warps=4, num_stages=3)


@functools.cache
def config_for(m: int, n: int, k: int, fp8: bool = False) -> LinearConfig:
    """The table's entry for m's bucket, else for the nearest smaller measured bucket of the
    same (n, k), else `default_config`. fp8 codes: FP8_TABLE's entry for m's bucket, else
    the default (the kernel runs every batch there, where a smaller bucket's GEMV shape
    would read the weights once a row)."""
    bucket = m_bucket(m)
    if fp8:
        entry = FP8_TABLE.get((bucket, n, k))
        return LinearConfig(*entry) if entry is not None else default_config(m, n, k, fp8)
    table = TABLE
    for measured in reversed(M_BUCKETS[: M_BUCKETS.index(bucket) + 1]):
        entry = table.get((measured, n, k))
        if entry is not None:
            return LinearConfig(*entry)
    return default_config(m, n, k, fp8)


def beats_cublas(m: int, n: int, k: int) -> bool:
    """Whether this kernel should run an (m, n, k) product instead of cuBLAS (with the
    fused work as separate kernels): TABLE holds only the buckets where it measured faster;
    a shape the sweep never saw uses the kernel up to M = 8 (GEMV-shaped products, where
    cuBLAS splits K and reaches about half of HBM bandwidth)."""
    if m > M_BUCKETS[-1]:
        return False
    bucket = m_bucket(m)
    if (bucket, n, k) in TABLE:
        return True
    if any(key[1:] == (n, k) for key in TABLE):
        return False
    return bucket <= 8


def fp8_scaled_mm_wins(m: int, n: int, k: int) -> bool:
    """Whether an (m, n, k) product with fp8 weights runs torch._scaled_mm (activations
    quantized too) instead of the weight-only kernel: from FP8_SCALED_MM_FROM rows on
    (its bucket), the measured crossing on every 1.7B matrix."""
    return m_bucket(m) >= FP8_SCALED_MM_FROM
