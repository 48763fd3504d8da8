#!/usr/bin/env python3
"""Sweep of kernels/window_attention.py's tiles for a decode step's chunk: keys per step
(BLOCK_N) x warps x pipeline stages, one layer of the real 12 Hz decoder (16 heads, 16 KV
heads, head_dim 64, 71 remembered frames) at --batch streams x --frames frames, rings
wrapped, slots shuffled. Each config: its output against the shipped kernel's on the
same ring (max |difference|; bf16), then the time per call
(triton.testing.do_bench_cudagraph). Writes --out/window_attention_tiles.json (when,
where, versions, every row) and prints the fastest.

    PYTHONPATH=runtime python3 bench/window_attention_tiles.py --out $OUT
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
import triton.language as tl
from triton.testing import do_bench_cudagraph

from ttsfleet_runtime.benchmark import report_start
from ttsfleet_runtime.kernels import window_attention as wa

HEADS, KV_HEADS, HEAD_DIM, MEMORY = 16, 16, 64, 71


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--frames", type=int, default=8)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("window_attention_tiles: needs a CUDA GPU")
    report = report_start(args)
    B, n, dev = args.batch, args.frames, "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, device=dev).to(torch.bfloat16)

    # The codec's layouts: projections [B, n, heads, d] seen as [B, heads, n, d].
    q = rand(B, n, HEADS, HEAD_DIM).transpose(1, 2)
    k = rand(B, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = rand(B, n, KV_HEADS, HEAD_DIM).transpose(1, 2)
    k_ring, v_ring = (
        rand(B + 1, KV_HEADS, MEMORY, HEAD_DIM),
        rand(B + 1, KV_HEADS, MEMORY, HEAD_DIM),
    )
    rings = (k_ring.clone(), v_ring.clone())
    slots = torch.randperm(B, device=dev)
    start = torch.randint(4 * MEMORY, 6 * MEMORY, (B,), device=dev)
    out = torch.empty((B, n, HEADS, HEAD_DIM), dtype=torch.bfloat16, device=dev)
    shipped = wa.window_attention(q, k, v, k_ring, v_ring, slots, start).clone()

    def call(block_n: int, warps: int, stages: int) -> None:
        wa._window_attention_kernel[(B * KV_HEADS,)](
            q, k, v, k_ring, v_ring, slots, start, out, n,
            *q.stride(), *k.stride(), *v.stride(), *k_ring.stride(), *v_ring.stride(),
            *out.stride(),
            HEAD_DIM**-0.5 * 1.4426950408889634,
            KV_HEADS=KV_HEADS, GROUP=HEADS // KV_HEADS, HEAD_DIM=HEAD_DIM, MEMORY=MEMORY,
            BLOCK_Q=16, BLOCK_N=block_n, BLOCK_D=HEAD_DIM, DOT_TYPE=tl.bfloat16,
            DOT_PRECISION="tf32", num_warps=warps, num_stages=stages,
        )  # fmt: skip

    rows = []
    for block_n, warps, stages in itertools.product([16, 32, 64, 128], [1, 2, 4, 8], [1, 2, 3]):
        row = dict(block_n=block_n, num_warps=warps, num_stages=stages)
        try:
            k_ring.copy_(rings[0])
            v_ring.copy_(rings[1])
            call(block_n, warps, stages)
            row["max_abs_difference"] = (out.float() - shipped.float()).abs().max().item()
            row["us"] = 1000 * do_bench_cudagraph(
                lambda b=block_n, w=warps, s=stages: call(b, w, s)
            )
        except Exception as e:  # a config that does not compile or launch
            row["error"] = repr(e)[:300]
        rows.append(row)
    report["rows"] = rows
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "window_attention_tiles.json").write_text(json.dumps(report, indent=1))
    timed = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    for r in timed[:10]:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
