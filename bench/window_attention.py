#!/usr/bin/env python3
"""GPU micro-benchmark of the codec pre-transformer's sliding-window attention: the
slot-addressed KV ring kernel (kernels/window_attention.py) against the path it replaced.

One layer of the real 12 Hz decoder (16 heads, 16 KV heads, head_dim 64, 71 remembered
frames), B streams in B of B + 1 slots (shuffled) at steady-state positions (rings
wrapped), n new frames each. Variants, per (B, n):
  - ring: `window_attention` on the layer's ring [B + 1, (key, value), K, M, d] read and
    written in place through the slot index; its output already in the [B, n, H * d]
    layout the output projection reads.
  - old: what one layer cost before: its key/value state rows gathered by slot
    (index_select), concatenated with the chunk's keys, SDPA with the boolean window mask
    (built once outside, as it was once a step), the last M keys copied back into the
    gathered rows, the rows scattered back (index_copy_), the output transposed for the
    projection.
  - old_attention: the concatenation, SDPA and transpose of `old` only (no state traffic).
  - torch_ring: `window_attention_torch` (the CPU path) on the GPU, for reference.
Correctness per case: outputs of ring and old against old in float32, and the ring after
the call against old's state after it, re-laid out (must be equal).
Timing: each variant captured in one CUDA graph of --layers calls over distinct layer
buffers (a decode step has 8 layers), L2 flushed before each replay, CUDA events around
it (ttsfleet_runtime.benchmark.GraphTimer); the per-call median is reported.

    PYTHONPATH=runtime python3 bench/window_attention.py --out $OUT
    TRITON_INTERPRET=1 PYTHONPATH=runtime python3 bench/window_attention.py --smoke --out /tmp/x
      (CPU smoke run of every code path: tiny shapes, no graphs)

Writes --out/window_attention.json (machine, versions, config, raw samples) and prints a
table. Exit status 1 if a case failed or disagreed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from ttsfleet_runtime.benchmark import GraphTimer, relative_error
from ttsfleet_runtime.codec.config import CodecDecoderConfig
from ttsfleet_runtime.kernels.window_attention import window_attention, window_attention_torch

TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}
_REAL = CodecDecoderConfig()


@dataclasses.dataclass
class Config:
    batches: tuple = (1, 32, 128, 256)
    frames: tuple = (1, 8)
    layers: int = _REAL.num_hidden_layers  # calls per captured graph
    iters: int = 50
    heads: int = _REAL.num_attention_heads
    kv_heads: int = _REAL.num_key_value_heads
    head_dim: int = _REAL.head_dim
    memory: int = _REAL.sliding_window - 1


SMOKE = Config(batches=(1, 3), frames=(1, 8), layers=2, iters=2, heads=4, kv_heads=2,
               head_dim=16, memory=7)  # fmt: skip


class Layer:
    """One layer's buffers for B streams: the chunk's q/k/v (strided views of one
    projection, as the model has them), the old oldest-first state rows and the ring
    holding the same keys at p % M."""

    def __init__(self, cfg: Config, batch: int, n: int, dtype, device, gen):
        H, K, M, d = cfg.heads, cfg.kv_heads, cfg.memory, cfg.head_dim
        rows = batch + 1
        self.slots = torch.randperm(rows, generator=gen)[:batch].to(device)
        self.start = torch.randint(M, 8 * M, (batch,), generator=gen).to(device)
        qkv = torch.randn(batch, n, H + 2 * K, d, generator=gen).to(device, dtype).transpose(1, 2)
        self.q, self.k, self.v = qkv.split([H, K, K], dim=1)
        self.old = torch.randn(rows, 2, K, M, d, generator=gen).to(device, dtype)
        self.ring = self.old.clone()
        self.ring[self.slots] = ring_layout(self.old[self.slots], self.start, M)
        q_pos = self.start[:, None] + torch.arange(n, device=device)
        k_pos = torch.cat([q_pos[:, :1] - M + torch.arange(M, device=device), q_pos], dim=1)
        qp, kp = q_pos[:, :, None], k_pos[:, None, :]
        self.mask = ((kp >= 0) & (kp <= qp) & (kp >= qp - M))[:, None]
        self.out = torch.empty(batch, n, H, d, dtype=dtype, device=device)

    def ring_call(self):
        args = (self.q, self.k, self.v, self.ring[:, 0], self.ring[:, 1], self.slots, self.start)
        return window_attention(*args, out=self.out).flatten(2)

    def torch_ring_call(self):
        args = (self.q, self.k, self.v, self.ring[:, 0], self.ring[:, 1], self.slots, self.start)
        return window_attention_torch(*args).flatten(2)

    def old_call(self, state_traffic: bool = True):
        return old_path(self.q, self.k, self.v, self.old, self.slots, self.mask, state_traffic)


def old_path(q, k, v, old, slots, mask, state_traffic: bool = True) -> torch.Tensor:
    """One layer before the ring: `old` [rows, 2, K, M, d] oldest first, updated."""
    M = old.shape[3]
    gathered = old.index_select(0, slots)
    keys = torch.cat([gathered[:, 0], k], dim=2)
    values = torch.cat([gathered[:, 1], v], dim=2)
    group = q.shape[1] // k.shape[1]
    attend_k, attend_v = keys, values
    if group > 1:
        attend_k, attend_v = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    out = F.scaled_dot_product_attention(q, attend_k, attend_v, attn_mask=mask)
    if state_traffic:
        gathered[:, 0].copy_(keys[:, :, keys.shape[2] - M :])
        gathered[:, 1].copy_(values[:, :, values.shape[2] - M :])
        old.index_copy_(0, slots, gathered)
    return out.transpose(1, 2).flatten(2)


def ring_layout(oldest_first: torch.Tensor, start: torch.Tensor, memory: int) -> torch.Tensor:
    """[B, 2, K, M, d] keys of positions start-M..start-1 (oldest first) -> the ring
    layout, position p at index p % M."""
    at = (start[:, None] - memory + torch.arange(memory, device=start.device)) % memory
    ring = torch.empty_like(oldest_first)
    rows = torch.arange(len(start), device=start.device)[:, None]
    ring[rows, :, :, at] = oldest_first.permute(0, 3, 1, 2, 4)
    return ring


def check(layer: Layer, n: int, dtype) -> dict:
    """One call of ring and of old on a copy of the same layer: outputs against old in
    float32, and the rings after against old's state after, re-laid out."""
    old_before, ring_before = layer.old.clone(), layer.ring.clone()
    f32 = (t.float() for t in (layer.q, layer.k, layer.v, layer.old))
    ref = old_path(*f32, layer.slots, layer.mask)
    out_old = layer.old_call()
    out_ring = layer.ring_call()
    want_ring = ring_layout(layer.old[layer.slots], layer.start + n, layer.old.shape[3])
    result = {
        "ring_rel_err": relative_error(out_ring, ref),
        "old_rel_err": relative_error(out_old, ref),
        "ring_state_equal": bool(torch.equal(layer.ring[layer.slots], want_ring)),
    }
    result["ok"] = (
        result["ring_rel_err"] < TOLERANCE[dtype]
        and result["old_rel_err"] < TOLERANCE[dtype]
        and result["ring_state_equal"]
    )
    layer.old.copy_(old_before)
    layer.ring.copy_(ring_before)
    return result


def bench_case(timer: GraphTimer, cfg: Config, dtype, device, gen, batch: int, n: int) -> dict:
    layers = [Layer(cfg, batch, n, dtype, device, gen) for _ in range(cfg.layers)]
    row = {"batch": batch, "frames": n, "check": check(layers[0], n, dtype), "variants": {}}
    variants = {
        "ring": Layer.ring_call,
        "old": Layer.old_call,
        "old_attention": lambda layer: layer.old_call(state_traffic=False),
        "torch_ring": Layer.torch_ring_call,
    }
    for name, call in variants.items():
        try:
            calls = [(lambda layer=layer, call=call: call(layer)) for layer in layers]
            row["variants"][name] = timer.time(timer.capture(calls), len(calls))
        except Exception as exc:  # noqa: BLE001 - one variant's failure is data
            traceback.print_exc()
            row["variants"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    v = row["variants"]
    if "median_ms" in v["ring"] and "median_ms" in v["old"]:
        row["speedup_vs_old"] = v["old"]["median_ms"] / v["ring"]["median_ms"]
    return row


def table(results: dict) -> str:
    lines = ["per layer call (ms)       ring     old  old_attn torch_ring    x    err     ok"]
    for r in results["cases"]:
        label = f"B={r['batch']} n={r['frames']}"
        if "error" in r:
            lines.append(f"{label:<20} ERROR {r['error'][:60]}")
            continue
        v = r["variants"]

        def ms(name, v=v):
            return f"{v[name]['median_ms']:9.4f}" if "median_ms" in v[name] else "    error"

        lines.append(
            f"{label:<20} {ms('ring')} {ms('old')} {ms('old_attention')} {ms('torch_ring')}"
            f" {r.get('speedup_vs_old', float('nan')):6.2f} {r['check']['ring_rel_err']:.1e}"
            f" {'ok' if r['check']['ok'] else 'BAD'}"
        )
    lines.append(f"x 8 layers = a decode step's attention; {len(results['errors'])} error(s)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--batches", type=int, nargs="+", help="default 1 32 128 256")
    parser.add_argument("--frames", type=int, nargs="+", help="default 1 8")
    parser.add_argument("--iters", type=int, help="timed replays per variant (default 50)")
    parser.add_argument("--budget-s", type=float, default=300, help="no new case after this")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, CPU interpreter")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not (args.smoke and os.environ.get("TRITON_INTERPRET") == "1"):
        parser.error(
            "needs a CUDA GPU; on a CPU only the smoke run works: "
            "TRITON_INTERPRET=1 ... --smoke (Triton's interpreter)"
        )
    cfg = SMOKE if args.smoke else Config()
    overrides = {"batches": args.batches, "frames": args.frames, "iters": args.iters}
    cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if v})
    dtype = getattr(torch, args.dtype)
    device = torch.device("cuda" if cuda else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        "benchmark": "window_attention",
        "machine": {
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "host": platform.node(),
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(),
        },
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
        },
        "config": dataclasses.asdict(cfg) | {"dtype": args.dtype, "budget_s": args.budget_s},
        "cases": [],
        "errors": [],
    }
    path = args.out / "window_attention.json"
    began = time.monotonic()
    timer = GraphTimer(device, cfg.iters)
    gen = torch.Generator().manual_seed(0)
    for n in cfg.frames:
        for batch in cfg.batches:
            if time.monotonic() - began > args.budget_s:
                results["errors"].append(f"budget: B={batch} n={n} not run")
                continue
            try:
                results["cases"].append(bench_case(timer, cfg, dtype, device, gen, batch, n))
            except Exception as exc:  # noqa: BLE001 - keep the other cases
                traceback.print_exc()
                error = f"{type(exc).__name__}: {exc}"
                results["cases"].append({"batch": batch, "frames": n, "error": error})
                results["errors"].append(f"B={batch} n={n}: {error}")
            path.write_text(json.dumps(results, indent=1))
            if cuda:
                torch.cuda.empty_cache()
    print(table(results))
    print(f"wrote {path}")
    bad = [r for r in results["cases"] if "error" in r or not r["check"]["ok"]]
    return 1 if bad or results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
