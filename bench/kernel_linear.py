#!/usr/bin/env python3
"""Sweep of kernels.linear against cuBLAS on the decode step's matmul shapes; writes the table.

For every weight shape of the 1.7B / 0.6B talker and the code predictor and every batch
M in 1..128 (the decode step's rows):
  1. correctness on the GPU of every candidate config (vs a float32 product),
  2. plain product (no fusion) per candidate config of a small sweep, and cuBLAS F.linear,
  3. with the call site's fusion (norm prologue / silu*up prologue / bias / residual), the
     best plain configs against today's composition (compiled norm or silu*up, F.linear,
     residual add, as separate kernels),
timing each as the median per call of a CUDA graph of back-to-back calls (replayed
several times, CUDA events), rotating among weight copies that together exceed the L2
cache so that the weights come from HBM as in a decode step.
Triton compiles run first in parallel worker processes (they fill Triton's disk cache).

Writes --out/kernel_linear.json (machine, versions, raw samples, per (shape, M) the best
config and whether it beats cuBLAS / the composition, a 1.7B step estimate) and
--out/linear_table.py (the TABLE to paste into runtime/ttsfleet_runtime/kernels/linear.py),
then prints a summary table.

    PYTHONPATH=runtime python3 bench/kernel_linear.py --out $OUT

--smoke runs the whole pipeline on tiny shapes (on a CPU under TRITON_INTERPRET=1, it
checks the script, not the speed).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from ttsfleet_runtime.benchmark import timed
from ttsfleet_runtime.kernels.linear import LinearConfig, linear, m_bucket
from ttsfleet_runtime.model.layers import rms_norm_eager, silu_mul_eager

DTYPE = torch.bfloat16
EPS = 1e-6
M_VALUES = (1, 2, 4, 8, 16, 32, 64, 128)
TOLERANCE = 1e-2  # relative L2 error against a float32 product (bf16 output rounding ~1e-3)
REPLAYS = 7
MIN_CALLS = 20  # per graph
TOP_FOR_FUSED = 3  # plain-sweep winners re-timed with the call site's fusion


@dataclass(frozen=True)
class Site:
    """A call site: weight [n, k], its fusion, how many times a 1.7B decode step runs it
    (0: not in that step; the text projection runs on prefill / trailing text only)."""

    name: str
    n: int
    k: int
    norm: bool = False
    gated: bool = False
    bias: bool = False
    residual: bool = False
    per_17b_step: int = 0


# The first site of each (n, k) is its table's owner (the most frequent use).
SITES = [
    Site("1.7B talker qkv", 4096, 2048, norm=True, per_17b_step=28),
    Site("1.7B talker o", 2048, 2048, residual=True, per_17b_step=28),
    Site("1.7B talker gate_up", 12288, 2048, norm=True, per_17b_step=28),
    Site("1.7B talker down", 2048, 6144, gated=True, residual=True, per_17b_step=28),
    Site("1.7B codec_head", 3072, 2048, per_17b_step=1),
    Site("1.7B text fc1/fc2", 2048, 2048, bias=True),
    Site("predictor / 0.6B qkv", 4096, 1024, norm=True, per_17b_step=75),
    Site("predictor / 0.6B o", 1024, 2048, residual=True, per_17b_step=75),
    Site("predictor / 0.6B gate_up", 6144, 1024, norm=True, per_17b_step=75),
    Site("predictor / 0.6B down", 1024, 3072, gated=True, residual=True, per_17b_step=75),
    Site("predictor lm_head", 2048, 1024, per_17b_step=15),
    Site("1.7B predictor projection", 1024, 2048, bias=True, per_17b_step=1),
    Site("0.6B codec_head", 3072, 1024),
]

SMOKE_SITES = [
    Site("smoke norm", 48, 64, norm=True, per_17b_step=2),
    Site("smoke gated", 32, 64, gated=True, residual=True, per_17b_step=2),
    Site("smoke bias", 48, 64, bias=True),
]

# gemv: (block_n, block_k, num_warps); its block_m comes from M.
GEMV_TILES = [
    (4, 512, 4),
    (4, 1024, 4),
    (8, 256, 4),
    (8, 512, 4),
    (8, 1024, 8),
    (16, 256, 4),
    (16, 256, 8),
    (16, 512, 8),
    (32, 256, 4),
    (32, 256, 8),
]
# dot: (block_n, block_k, num_warps, num_stages).
DOT_TILES = [
    (16, 256, 4, 4),
    (32, 128, 4, 4),
    (32, 256, 4, 3),
    (64, 64, 4, 6),
    (64, 128, 4, 4),
    (64, 256, 4, 3),
    (128, 64, 4, 4),
    (128, 128, 8, 3),
]


def gemv_block_ms(m: int) -> list[int]:
    return {1: [1], 2: [1, 2], 4: [2, 4], 8: [4, 8], 16: [8, 16]}.get(m, [])


def dot_block_ms(m: int) -> list[int]:
    return [16] if m <= 16 else [16, 32] if m <= 32 else [32, 64]


def candidates(m: int, smoke: bool) -> list[LinearConfig]:
    if smoke:
        return [LinearConfig("gemv", min(m_bucket(m), 4), 16, 32), LinearConfig("dot", 16, 16, 32)]
    configs = [
        LinearConfig("gemv", bm, bn, bk, warps, 1)
        for bm in gemv_block_ms(m)
        for bn, bk, warps in GEMV_TILES
    ]
    configs += [
        LinearConfig("dot", bm, bn, bk, warps, stages)
        for bm in dot_block_ms(m)
        for bn, bk, warps, stages in DOT_TILES
    ]
    return configs


def config_tuple(cfg: LinearConfig) -> tuple:
    return (cfg.variant, cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages)


def flags_of(site: Site | None) -> dict:
    if site is None:
        return {"norm": False, "gated": False, "bias": False, "residual": False}
    return {"norm": site.norm, "gated": site.gated, "bias": site.bias, "residual": site.residual}


def warm_job(cfg: tuple, n: int, k: int, flags: dict) -> tuple:
    """A compile job (hashable, picklable) that specialises like the timed call."""
    return cfg, n, k, tuple(sorted(flags.items()))


# ---------------------------------------------------------------------------------- tensors


class Operands:
    """Random inputs of one (site, M) and `copies` weight copies (together past the L2)."""

    def __init__(self, n, k, m, flags, copies, device, seed=0):
        g = torch.Generator(device="cpu").manual_seed(seed)

        def rand(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=DTYPE)

        self.n, self.k, self.m, self.flags = n, k, m, flags
        self.x = rand(m, 2 * k if flags["gated"] else k)
        first = rand(n, k, scale=k**-0.5)
        self.weights = [first] + [first.clone() for _ in range(copies - 1)]
        self.bias = rand(n, scale=0.1) if flags["bias"] else None
        self.residual = rand(m, n) if flags["residual"] else None
        self.norm_weight = (1 + rand(k, scale=0.1)) if flags["norm"] else None
        self.out = torch.empty(m, n, device=device, dtype=DTYPE)
        # The eager prologue's output: what cuBLAS alone multiplies, and the reference's input.
        self.x_ready = self.x
        if flags["norm"]:
            self.x_ready = rms_norm_eager(self.x, self.norm_weight, EPS)
        if flags["gated"]:
            self.x_ready = silu_mul_eager(self.x)

    def weight(self, i: int) -> torch.Tensor:
        return self.weights[i % len(self.weights)]

    def reference(self) -> torch.Tensor:
        """float32 product of the eager prologue's output (rounded like the kernel's input)."""
        y = F.linear(
            self.x_ready.float(),
            self.weights[0].float(),
            None if self.bias is None else self.bias.float(),
        )
        return y if self.residual is None else y + self.residual.float()

    def cublas(self, i: int) -> torch.Tensor:
        """F.linear alone, on the ready input (+ bias, which cuBLAS fuses)."""
        return F.linear(self.x_ready, self.weight(i), self.bias)

    def ours(self, i: int, cfg: LinearConfig) -> torch.Tensor:
        return linear(
            self.x,
            self.weight(i),
            bias=self.bias,
            residual=self.residual,
            norm_weight=self.norm_weight,
            eps=EPS,
            gated=self.flags["gated"],
            out=self.out,
            config=cfg,
        )

    def bytes_read_written(self) -> int:
        size = DTYPE.itemsize
        total = (self.n * self.k + self.x.numel() + self.m * self.n) * size
        for t in (self.bias, self.residual, self.norm_weight):
            if t is not None:
                total += t.numel() * size
        return total


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if not torch.isfinite(out).all():
        return math.inf
    return ((out.float() - ref).norm() / ref.norm()).item()


# ---------------------------------------------------------------------------------- timing


class Timer:
    """Median microseconds per call of `call(i)` (i: the weight copy), captured `calls` times
    back to back in one CUDA graph and replayed REPLAYS times; a wall clock on a CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __call__(self, call, calls: int) -> tuple[float, list[float]]:
        if not self.cuda:
            t0 = time.perf_counter()
            for i in range(calls):
                call(i)
            return (time.perf_counter() - t0) * 1e6 / calls, []
        for i in range(min(calls, 2)):  # compiles, cuBLAS handles, dynamo guards
            call(i)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                call(i)
        graph.replay()
        torch.cuda.synchronize()
        samples = [ms * 1e3 / calls for ms in timed(graph.replay, REPLAYS)]
        del graph
        return statistics.median(samples), [round(s, 3) for s in samples]


# ------------------------------------------------------------------------ parallel compiles


def _warm_jobs(jobs: list[tuple]) -> tuple[int, list[str]]:
    """Worker: run each (config, n, k, flags) once so that Triton compiles it into its disk
    cache (the arguments specialise like the timed calls: same n, k, strides, flags)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    done, errors = 0, []
    for cfg, n, k, flags in jobs:
        try:
            Operands(n, k, 1, dict(flags), 1, device).ours(0, LinearConfig(*cfg))
            done += 1
        except Exception as exc:  # reported, and the timed call will fail it again
            errors.append(f"{cfg} {n}x{k} {flags}: {type(exc).__name__}: {exc}"[:300])
    if device.type == "cuda":
        torch.cuda.synchronize()
    return done, errors


def start_warm(jobs: list[tuple], workers: int):
    """Spreads the compile jobs over worker processes; -> (pool, async result) or None."""
    if not jobs or workers < 1:
        return None
    try:
        ctx = multiprocessing.get_context("spawn")
        pool = ctx.Pool(workers)
        # One job a task: idle workers take the next one (compile times differ 10x).
        return pool, pool.map_async(_warm_jobs, [[job] for job in jobs], chunksize=1)
    except Exception as exc:
        print(f"  parallel compile not started ({exc}); compiling on first use", flush=True)
        return None


def finish_warm(handle, timeout_s: float, report: dict, label: str) -> None:
    if handle is None:
        return
    pool, result = handle
    t0 = time.perf_counter()
    try:
        outcomes = result.get(timeout=max(timeout_s, 10.0))
        done = sum(d for d, _ in outcomes)
        errors = [e for _, errs in outcomes for e in errs]
        report["compile"][label] = {
            "compiled": done,
            "errors": errors,
            "waited_s": round(time.perf_counter() - t0, 1),
        }
        print(f"  {label}: {done} kernels compiled in workers, {len(errors)} failed", flush=True)
        for e in errors[:5]:
            print(f"    {e}", flush=True)
    except Exception as exc:
        report["errors"].append(f"{label}: {type(exc).__name__}: {exc}")
        print(f"  {label}: workers did not finish ({exc}); compiling on first use", flush=True)
    finally:
        pool.terminate()
        pool.join()


# ------------------------------------------------------------------------ the composition


class Composition:
    """Today's path: compiled (dynamic shapes, as engine.fusion) norm / silu*up, then
    F.linear, then the residual add, as separate kernels."""

    def __init__(self, compiled: bool):
        self.kind = "eager"
        self.rms_norm, self.silu_mul = rms_norm_eager, silu_mul_eager
        if compiled:
            try:
                self.rms_norm = torch.compile(rms_norm_eager, dynamic=True)
                self.silu_mul = torch.compile(silu_mul_eager, dynamic=True)
                self.kind = "torch.compile(dynamic=True)"
            except Exception as exc:
                print(f"  torch.compile unavailable ({exc}): eager composition", flush=True)

    def warm(self, sites, device) -> None:
        """Compile every shape family (dynamo specialises size 1) outside the timed part."""
        for site in sites:
            for m in (1, 2):
                ops = Operands(site.n, site.k, m, flags_of(site), 1, device)
                self.call(ops, 0)

    def call(self, ops: Operands, i: int) -> torch.Tensor:
        x = ops.x
        if ops.flags["norm"]:
            x = self.rms_norm(x, ops.norm_weight, EPS)
        if ops.flags["gated"]:
            x = self.silu_mul(x)
        y = F.linear(x, ops.weight(i), ops.bias)
        return y if ops.residual is None else ops.residual + y


# ---------------------------------------------------------------------------------- sections


def rotation(n: int, k: int, l2_bytes: int, smoke: bool) -> tuple[int, int]:
    """-> (weight copies, calls per graph): copies that together exceed the L2 three times,
    so that each call reads its weight from HBM, and at least MIN_CALLS calls."""
    if smoke:
        return 2, 2
    copies = max(1, min(48, math.ceil(3 * l2_bytes / (n * k * DTYPE.itemsize))))
    return copies, max(MIN_CALLS, copies)


def time_config(ops, cfg, timer, calls, ref) -> dict:
    row = {"config": config_tuple(cfg)}
    try:
        ops.out.fill_(float("nan"))
        row["rel_err"] = relative_error(ops.ours(0, cfg), ref)
        if not row["rel_err"] < TOLERANCE:
            row["error"] = "wrong result"
            return row
        us, samples = timer(functools.partial(ops.ours, cfg=cfg), calls)
        row.update(us=round(us, 3), samples_us=samples)
        row["gbps"] = round(ops.bytes_read_written() / us / 1e3, 1)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def set_best(row: dict) -> dict | None:
    """row["best"]: the fastest timed config of row["configs"] (None if none was timed)."""
    timed = [c for c in row.get("configs", []) if "us" in c]
    best = min(timed, key=lambda c: c["us"]) if timed else None
    row["best"] = best and {key: best[key] for key in ("config", "us", "gbps")}
    return row["best"]


def sweep(shapes, args, timer, device, l2_bytes, report, deadline) -> dict:
    """Plain products: cuBLAS and every candidate config, per (n, k, M)."""
    results = {}
    for n, k in shapes:
        copies, calls = rotation(n, k, l2_bytes, args.smoke)
        for m in args.m_values:
            key = (n, k, m)
            if time.perf_counter() > deadline:
                report["errors"].append(f"sweep {n}x{k} M={m}: skipped, out of time")
                continue
            t0 = time.perf_counter()
            entry = {"n": n, "k": k, "m": m, "weight_copies": copies, "calls_per_graph": calls}
            try:
                ops = Operands(n, k, m, flags_of(None), copies, device)
                ref = ops.reference()
                entry["bytes"] = ops.bytes_read_written()
                us, samples = timer(ops.cublas, calls)
                entry["cublas_us"], entry["cublas_samples_us"] = round(us, 3), samples
                entry["cublas_gbps"] = round(entry["bytes"] / us / 1e3, 1)
                entry["cublas_rel_err"] = relative_error(ops.cublas(0), ref)
                entry["configs"] = [
                    time_config(ops, cfg, timer, calls, ref) for cfg in candidates(m, args.smoke)
                ]
            except Exception as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
                report["errors"].append(f"sweep {n}x{k} M={m}: {entry['error']}")
            best = set_best(entry)
            timed = [c for c in entry.get("configs", []) if "us" in c]
            failed = [c for c in entry.get("configs", []) if "error" in c]
            results[key] = entry
            print(
                f"  {n:>5}x{k:<5} M={m:<3} cuBLAS {entry.get('cublas_us', float('nan')):7.1f} us"
                f"  best {best['us'] if best else float('nan'):7.1f} us"
                f" {best['gbps'] if best else 0:6.0f} GB/s {best['config'] if best else ''}"
                f"  ({len(timed)} timed, {len(failed)} failed, {time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
    return results


def fused(sites, plain, args, timer, device, l2_bytes, composition, report, deadline) -> list:
    """Each call site with its fusion: cuBLAS F.linear alone, the composition, and the
    plain sweep's best configs."""
    rows = []
    for site in sites:
        flags = flags_of(site)
        copies, calls = rotation(site.n, site.k, l2_bytes, args.smoke)
        for m in args.m_values:
            if time.perf_counter() > deadline:
                report["errors"].append(f"fused {site.name} M={m}: skipped, out of time")
                continue
            row = {"site": site.name, "n": site.n, "k": site.k, "m": m, **flags}
            try:
                ops = Operands(site.n, site.k, m, flags, copies, device, seed=1)
                ref = ops.reference()
                row["bytes"] = ops.bytes_read_written()
                us, _ = timer(ops.cublas, calls)
                row["cublas_us"] = round(us, 3)
                row["cublas_gbps"] = round(row["bytes"] / us / 1e3, 1)
                row["composition_rel_err"] = relative_error(composition.call(ops, 0), ref)
                us, samples = timer(functools.partial(composition.call, ops), calls)
                row["composition_us"], row["composition_samples_us"] = round(us, 3), samples
                row["configs"] = [
                    time_config(ops, LinearConfig(*cfg), timer, calls, ref)
                    for cfg in top_configs(plain.get((site.n, site.k, m)))
                ]
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                report["errors"].append(f"fused {site.name} M={m}: {row['error']}")
            best = set_best(row)
            if best:
                row["beats_cublas"] = best["us"] < row["cublas_us"]
                row["beats_composition"] = best["us"] < row["composition_us"]
                row["speedup_vs_composition"] = round(row["composition_us"] / best["us"], 3)
            rows.append(row)
    return rows


def top_configs(entry: dict | None) -> list[tuple]:
    if not entry:
        return []
    timed = sorted((c for c in entry.get("configs", []) if "us" in c), key=lambda c: c["us"])
    return [tuple(c["config"]) for c in timed[:TOP_FOR_FUSED]]


def table_of(sites, plain: dict, fused_rows: list) -> dict:
    """(M bucket, n, k) -> (config, note): the owner site's best fused config, else the best
    plain config."""
    owners = {}
    for site in sites:
        owners.setdefault((site.n, site.k), site.name)
    table = {}
    for (n, k, m), entry in plain.items():
        fused_row = next(
            (r for r in fused_rows if r["site"] == owners[(n, k)] and r["m"] == m and r["best"]),
            None,
        )
        if fused_row:
            best = fused_row["best"]
            note = (
                f"{owners[(n, k)]}: {best['us']:.1f} us, {best['gbps']:.0f} GB/s; composition "
                f"{fused_row['composition_us']:.1f} us, cuBLAS alone {fused_row['cublas_us']:.1f}"
            )
        elif entry.get("best"):
            best = entry["best"]
            note = f"plain: {best['us']:.1f} us; cuBLAS {entry['cublas_us']:.1f} us"
        else:
            continue
        table[(m_bucket(m), n, k)] = (tuple(best["config"]), note)
    return table


def write_table(path: Path, table: dict, header: str) -> None:
    lines = [
        f"# Written by bench/kernel_linear.py: {header}",
        "# Paste as TABLE in runtime/ttsfleet_runtime/kernels/linear.py.",
        "# (M bucket, N, K): (variant, block_m, block_n, block_k, num_warps, num_stages)",
        "TABLE = {",
    ]
    for key in sorted(table):
        cfg, note = table[key]
        lines.append(f"    {key}: {cfg!r},  # {note}")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n")


def step_estimate(sites, fused_rows, m_values) -> dict:
    """Sum over a 1.7B decode step's matmuls (isolated kernel times x runs per step)."""
    out = {}
    for m in m_values:
        totals = {"cublas_alone_us": 0.0, "composition_us": 0.0, "ours_us": 0.0}
        complete = True
        for site in sites:
            if not site.per_17b_step:
                continue
            row = next((r for r in fused_rows if r["site"] == site.name and r["m"] == m), None)
            if not row or not row.get("best"):
                complete = False
                continue
            totals["cublas_alone_us"] += site.per_17b_step * row["cublas_us"]
            totals["composition_us"] += site.per_17b_step * row["composition_us"]
            totals["ours_us"] += site.per_17b_step * row["best"]["us"]
        out[m] = {key: round(v, 1) for key, v in totals.items()} | {"complete": complete}
    return out


def print_summary(fused_rows, steps, m_values) -> None:
    print("\nours (best config, fused) / today's composition, microseconds per call:")
    print(f"{'site':<28}" + "".join(f"{'M=' + str(m):>14}" for m in m_values))
    for name in dict.fromkeys(r["site"] for r in fused_rows):
        cells = []
        for m in m_values:
            row = next((r for r in fused_rows if r["site"] == name and r["m"] == m), None)
            if row and row.get("best"):
                cells.append(f"{row['best']['us']:.1f}/{row['composition_us']:.1f}")
            else:
                cells.append("-")
        print(f"{name[:28]:<28}" + "".join(f"{c:>14}" for c in cells))
    print("\n1.7B decode step, matmuls only (sum of isolated calls), microseconds:")
    print(f"{'M':>5} {'cuBLAS alone':>13} {'composition':>12} {'ours fused':>11}")
    for m, s in steps.items():
        mark = "" if s["complete"] else "  (incomplete)"
        print(
            f"{m:>5} {s['cublas_alone_us']:>13.0f} {s['composition_us']:>12.0f} "
            f"{s['ours_us']:>11.0f}{mark}"
        )


# ---------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=220.0, help="stop sweeping after")
    parser.add_argument("--workers", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)))
    parser.add_argument("--eager-composition", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (checks the script)")
    args = parser.parse_args()
    args.m_values = (1, 3, 17) if args.smoke else M_VALUES
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    props = torch.cuda.get_device_properties(device) if cuda else None
    l2_bytes = getattr(props, "L2_cache_size", 50 << 20) if cuda else 50 << 20
    sites = SMOKE_SITES if args.smoke else SITES
    shapes = list(dict.fromkeys((s.n, s.k) for s in sites))
    report = {
        "machine": {
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "sms": props.multi_processor_count if cuda else None,
            "l2_bytes": l2_bytes,
            "host": platform.node(),
            "python": platform.python_version(),
        },
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "dtype": str(DTYPE),
        "tolerance": TOLERANCE,
        "replays": REPLAYS,
        "sites": [asdict(s) for s in sites],
        "compile": {},
        "errors": [],
    }
    plain, fused_rows, steps, table = {}, [], {}, {}
    json_path = args.out / "kernel_linear.json"
    try:
        # 1. Plain sweep compiles in workers while this process compiles the composition.
        print(f"[{time.perf_counter() - t_start:5.1f}s] compiling", flush=True)
        # One job a config: every shape's n, k and strides are multiples of 16 and of every
        # block_k, so the first shape specialises like all of them.
        n, k = shapes[0]
        plain_configs = dict.fromkeys(c for m in args.m_values for c in candidates(m, args.smoke))
        jobs = [warm_job(config_tuple(c), n, k, flags_of(None)) for c in plain_configs]
        warm = start_warm(jobs, args.workers)
        composition = Composition(compiled=cuda and not args.eager_composition)
        try:
            composition.warm(sites, device)
        except Exception as exc:
            report["errors"].append(f"composition compile: {exc}"[:300])
            composition = Composition(compiled=False)
        report["composition"] = composition.kind
        budget_end = t_start + args.budget_s
        # Compiles get at most 45% of the budget (what is not compiled by then compiles on
        # first use).
        finish_warm(warm, t_start + 0.45 * args.budget_s - time.perf_counter(), report, "plain")
        timer = Timer(device)
        # Leave a third of what is left for the fused stage.
        sweep_end = time.perf_counter() + (budget_end - time.perf_counter()) * 2 / 3
        print(f"[{time.perf_counter() - t_start:5.1f}s] plain sweep", flush=True)
        plain = sweep(shapes, args, timer, device, l2_bytes, report, sweep_end)

        # 2. The fused call sites with the plain winners.
        # One job per (config, fusion): as above, the shape does not change the specialisation.
        fused_jobs = {}
        for s in sites:
            for m in args.m_values:
                for cfg in top_configs(plain.get((s.n, s.k, m))):
                    job = warm_job(cfg, s.n, s.k, flags_of(s))
                    fused_jobs.setdefault((job[0], job[3]), job)
        jobs = list(fused_jobs.values())
        print(f"[{time.perf_counter() - t_start:5.1f}s] compiling {len(jobs)} fused", flush=True)
        wait = (budget_end - time.perf_counter()) / 2
        finish_warm(start_warm(jobs, args.workers), wait, report, "fused")
        print(f"[{time.perf_counter() - t_start:5.1f}s] fused call sites", flush=True)
        fused_rows = fused(
            sites, plain, args, timer, device, l2_bytes, composition, report, budget_end
        )
        steps = step_estimate(sites, fused_rows, args.m_values)
        table = table_of(sites, plain, fused_rows)
    except Exception:
        report["errors"].append(traceback.format_exc()[-2000:])
        traceback.print_exc()
    finally:
        report["plain"] = list(plain.values())
        report["fused"] = fused_rows
        report["step_estimate_17b"] = steps
        report["table"] = {str(k): v[0] for k, v in table.items()}
        report["total_s"] = round(time.perf_counter() - t_start, 1)
        json_path.write_text(json.dumps(report, indent=1, default=str))
        header = f"{report['machine']['gpu']}, {report['date']}, torch {torch.__version__}"
        write_table(args.out / "linear_table.py", table, header)
    print_summary(fused_rows, steps, args.m_values)
    print(f"\nerrors: {len(report['errors'])}" + "".join(f"\n  {e}" for e in report["errors"][:10]))
    print(f"wrote {json_path} and {args.out / 'linear_table.py'} in {report['total_s']} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
