"""fp8 weights' speed: the weight-only fp8 kernel against bf16 and torch._scaled_mm, per
product and per decode step, in one run.

- products: each decoder-layer matrix of the talker and the code predictor (layer 0 of a
  checkpoint; 1.7B: talker qkv 4096x2048, o 2048x2048, gate_up 12288x2048, down
  2048x6144; predictor 4096x1024, 1024x2048, 6144x1024, 1024x3072) with its layer's
  fusions (qkv, gate_up: the input RMSNorm; o: the residual; down: the SiLU gate and the
  residual), at each `--ms` rows, three ways, all through the fused operations
  (model/ops.py) as a decode step calls them:
  `bf16` (the bf16 weight: the Triton kernel or cuBLAS, as linear_table decides),
  `fp8_kernel` (kernels/linear.py on the e4m3 codes, FP8_TABLE's configuration),
  `fp8_scaled_mm` (the input quantization kernel, then torch._scaled_mm).
  On the GPU each is timed as a CUDA graph of `--calls` calls (what a step pays, launch
  gaps included), in microseconds a call, with the weight-bytes bandwidth; each way's
  error against the float32 product it stands for is kept too;
- sweep (`--sweep`): candidate fp8 kernel configurations per (rows, matrix), the fastest
  printed as FP8_TABLE entries to paste into kernels/linear_table.py (fp8_table.py);
- steps: the graph decode step (talker + 15 predictor passes + sampling) at `--batches`
  for `--weights bf16` and `fp8` on the same checkpoint, timed as bench/fp8_pair.py
  times it.

Writes OUT/fp8_kernel.json (summary, machine, versions; after each section) and
OUT/fp8_kernel_samples.json.gz (every timing).

On the GPU machine, from the repository root (~3 minutes on an H200, a random 1.7B
checkpoint written first when none is in --ckpt-dir):
    PYTHONPATH=runtime python3 bench/fp8_kernel.py --out $OUT
On the CPU (tiny checkpoint, Triton's interpreter, eager steps; checks that it runs):
    PYTHONPATH=runtime python3 bench/fp8_kernel.py --device cpu --sizes tiny \\
        --model CKPT --ms 1,3 --batches 1 --calls 1 --replays 1 --out /tmp/k
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import gzip
import json
import os
import statistics
import sys
import traceback
from pathlib import Path

import torch

from ttsfleet_runtime.bench import fp8_pair
from ttsfleet_runtime.bench.common import Budget, machine_facts, ready_checkpoint, timed

REPO = Path(__file__).resolve().parents[1]

WAYS = ("bf16", "fp8_kernel", "fp8_scaled_mm")


def candidates(m: int) -> list[tuple]:
    """The sweep's fp8 kernel configurations for m rows, (variant, block_m, block_n,
    block_k, warps, stages): GEMV tiles up to 8 rows, tensor-core tiles from 8 (the
    fp8 dot puts the weight tile's N on the MMA's 64-row side, the rows on its narrow
    side), a few dozen each so that a sweep of every matrix fits a 10-minute call."""
    found = []
    if m <= 8:
        rows = [b for b in (1, 2, 4, 8) if b <= m][-2:]
        found += [
            ("gemv", bm, bn, bk, w, 1)
            for bm in rows
            for bn in (4, 8, 16)
            for bk in (1024, 2048)
            for w in (4, 8)
        ]
    if m >= 8:
        rows = [b for b in (16, 32, 64, 128) if b <= max(16, m)][-2:]
        found += [
            ("dot", bm, bn, bk, w, st)
            for bm in rows
            for bn in (64, 128)
            for bk in (64, 128, 256)
            for w, st in ((4, 3), (4, 4), (8, 3))
        ]
    return found


@dataclasses.dataclass
class Matrix:
    """One decoder-layer product as a step calls it."""

    name: str  # "talker.qkv"
    weight: torch.Tensor  # bf16 [N, K]
    fusion: dict  # the keyword arguments of ops.linear besides residual
    residual: bool


def matrices(model, only: str = "") -> list[Matrix]:
    """Layer 0's QUANTIZED_MATRICES of the talker and the predictor, with their fusions
    (`only`: a comma-separated subset of names such as "talker.o")."""
    found = []
    for stack_name, module in (("talker", model.talker), ("predictor", model.predictor)):
        if module is None:
            continue
        layer = module.stack.layers[0]
        fusions = {
            "qkv": (dict(norm_weight=layer.input_norm), False),
            "o": ({}, True),
            "gate_up": (dict(norm_weight=layer.post_attention_norm), False),
            "down": (dict(gated=True), True),
        }
        for name, (fusion, residual) in fusions.items():
            weight = getattr(layer, name).detach().contiguous()
            found.append(Matrix(f"{stack_name}.{name}", weight, fusion, residual))
    wanted = set(filter(None, only.split(",")))
    return [m for m in found if not wanted or m.name in wanted]


def inputs(matrix: Matrix, m: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    n, k = matrix.weight.shape
    g = torch.Generator(device=matrix.weight.device).manual_seed(m)
    width = 2 * k if matrix.fusion.get("gated") else k
    x = torch.randn(m, width, generator=g, device=matrix.weight.device).to(matrix.weight.dtype)
    residual = None
    if matrix.residual:
        residual = torch.randn(m, n, generator=g, device=x.device).to(x.dtype)
    return x, residual


def reference(matrix: Matrix, weight: torch.Tensor, x, residual) -> torch.Tensor:
    """The product `weight` (float32 [N, K]) stands for, from the eager prologue."""
    from ttsfleet_runtime.model.layers import rms_norm_eager, silu_mul_eager

    if "norm_weight" in matrix.fusion:
        x = rms_norm_eager(x, matrix.fusion["norm_weight"], 1e-6)
    if matrix.fusion.get("gated"):
        x = silu_mul_eager(x)
    y = x.float() @ weight.t()
    return y if residual is None else y + residual.float()


def call_time_us(fn, args) -> tuple[float, list[float]]:
    """Microseconds a call: on the GPU a CUDA graph of `--calls` calls replayed
    `--replays` times; on the CPU eager calls."""
    fn()  # compiles, and picks cuBLAS's kernels outside any capture
    if args.device != "cuda":
        samples = [s * 1e3 for s in timed(fn, args.replays)]
        return statistics.median(samples), samples
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(args.calls):
            fn()
    for _ in range(3):
        graph.replay()
    samples = [s * 1e3 / args.calls for s in timed(graph.replay, args.replays)]
    return statistics.median(samples), samples


def ways(matrix: Matrix, m: int, ops) -> dict:
    """Each way's call for m rows: a closure over fixed inputs, and what it stands for."""
    from ttsfleet_runtime.kernels import linear_table
    from ttsfleet_runtime.model.fp8 import Fp8Weight

    n, k = matrix.weight.shape
    x, residual = inputs(matrix, m)
    quantized = Fp8Weight(matrix.weight)
    exact = {
        "bf16": matrix.weight.float(),
        "fp8_kernel": quantized.dequantized(),
        "fp8_scaled_mm": quantized.dequantized(),
    }

    def run(weight, scaled_mm: bool):
        def call():
            # ops.linear reads the table at each call: the bench picks the way per call.
            # (past every bucket: the kernel always)
            linear_table.FP8_SCALED_MM_FROM = 1 if scaled_mm else 2 * linear_table.M_BUCKETS[-1]
            return ops.linear(x, weight, residual=residual, **matrix.fusion)

        return call

    calls = {
        "bf16": run(matrix.weight, False),
        "fp8_kernel": run(quantized, False),
        "fp8_scaled_mm": run(quantized, True),
    }
    return dict(calls=calls, exact=exact, x=x, residual=residual, quantized=quantized)


def products(model, args, summary: dict, raw: dict, dump) -> None:
    from ttsfleet_runtime.kernels import linear_table
    from ttsfleet_runtime.model import ops as talker_ops

    ops = talker_ops.fused()
    saved = linear_table.FP8_SCALED_MM_FROM
    rows = summary.setdefault("products", [])
    try:
        for matrix in matrices(model, args.matrices):
            n, k = matrix.weight.shape
            for m in args.m_list:
                if args.budget.left_s() < 0:
                    rows.append(dict(matrix=matrix.name, m=m, skipped="time budget"))
                    continue
                case = ways(matrix, m, ops)
                row = dict(matrix=matrix.name, n=n, k=k, m=m)
                for way in WAYS:
                    try:
                        call = case["calls"][way]
                        out = call()
                        want = reference(matrix, case["exact"][way], case["x"], case["residual"])
                        err = ((out.float() - want).norm() / want.norm()).item()
                        us, samples = call_time_us(call, args)
                    except Exception as e:  # e.g. _scaled_mm where the GPU has no fp8
                        row[way] = dict(error=repr(e)[:300])
                        continue
                    weight_bytes = n * k * (2 if way == "bf16" else 1)
                    row[way] = dict(
                        us=round(us, 2),
                        weight_gb_s=round(weight_bytes / us / 1e3, 1),
                        rel_error=err,
                    )
                    raw.setdefault("products", {})[f"{matrix.name}/m{m}/{way}"] = samples
                fp8 = row["fp8_kernel"].get("us")
                others = [row[w].get("us") for w in ("bf16", "fp8_scaled_mm")]
                if fp8 and all(others):
                    row["fp8_kernel_speedup_vs"] = {
                        w: round(o / fp8, 3)
                        for w, o in zip(("bf16", "fp8_scaled_mm"), others, strict=True)
                    }
                rows.append(row)
                args.budget.log(f"  {matrix.name} m={m}: " + _brief(row))
            dump()
    finally:
        linear_table.FP8_SCALED_MM_FROM = saved


def _brief(row: dict) -> str:
    return "  ".join(f"{w} {row[w].get('us', row[w].get('error'))}" for w in WAYS if w in row)


def sweep(model, args, summary: dict, raw: dict, dump) -> None:
    """The fastest fp8 kernel configuration per (rows bucket, matrix) among the candidates."""
    from ttsfleet_runtime.kernels import linear as kernel_linear
    from ttsfleet_runtime.kernels.linear_table import LinearConfig, m_bucket

    best: dict = {}
    for matrix in matrices(model, args.matrices):
        n, k = matrix.weight.shape
        for m in args.sweep_m_list:
            if args.budget.left_s() < 0:
                break
            case = ways(matrix, m, None)
            q = case["quantized"]
            timings = {}
            for entry in candidates(m):
                cfg = LinearConfig(*entry)
                # Tiles wider than K only mask; small K (the CPU test) keeps the narrowest.
                if cfg.block_k > max(k, 1024) or (cfg.variant == "gemv" and cfg.block_m > m):
                    continue

                def call(cfg=cfg, case=case, q=q, fusion=matrix.fusion):
                    return kernel_linear.linear(
                        case["x"],
                        q.codes,
                        weight_scale=q.scale,
                        residual=case["residual"],
                        config=cfg,
                        **fusion,
                    )

                try:
                    timings[entry] = call_time_us(call, args)[0]
                except Exception as e:  # a configuration past the GPU's shared memory
                    raw.setdefault("sweep_errors", {})[f"{matrix.name}/m{m}/{entry}"] = repr(e)
                if args.budget.left_s() < 0:
                    break
            if timings:
                entry = min(timings, key=timings.get)
                best[(m_bucket(m), n, k)] = (entry, timings[entry], matrix.name)
                raw.setdefault("sweep", {})[f"{matrix.name}/m{m}"] = {
                    str(e): t for e, t in timings.items()
                }
                args.budget.log(f"  sweep {matrix.name} m={m}: {entry} {timings[entry]:.2f} us")
        summary["sweep"] = {
            f"{key}": dict(config=entry, us=round(us, 2), matrix=name)
            for key, (entry, us, name) in best.items()
        }
        dump()
    lines = ["FP8_TABLE = {"]
    for key, (entry, us, name) in sorted(best.items()):
        lines.append(f"    {key}: {entry},  # {name}: {us:.1f} us")
    lines.append("}")
    Path(args.out, "fp8_table.py").write_text("\n".join(lines) + "\n")


def steps(ckpt: str, args, summary: dict, raw: dict, dump) -> None:
    """The decode step at each batch, bf16 then fp8 weights (one model in memory at a time)."""
    result = summary.setdefault("step_ms", {})
    for weights in fp8_pair.WAYS if args.batch_sizes else ():
        if args.budget.left_s() < 0:
            result[weights] = dict(skipped="time budget")
            continue
        side = fp8_pair.load_side(ckpt, weights, args)
        for B in args.batch_sizes:
            timing = fp8_pair.step_ms(side, B, args)
            result[f"{weights}_B{B}"] = round(timing["ms"], 4)
            summary["step_how"] = timing["how"]
            raw.setdefault("step_ms", {})[f"{weights}_B{B}"] = timing["samples_ms"]
            args.budget.log(f"  step {weights} B={B}: {timing['ms']:.3f} ms")
            dump()
        del side
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for fp8_kernel.json and the samples")
    ap.add_argument("--sizes", default="1.7B", help="one random checkpoint: 1.7B, 0.6B, tiny")
    ap.add_argument("--model", default=None, help="this checkpoint instead (the --sizes label)")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--ms", default="1,8,32,128,256", help="rows of each timed product")
    ap.add_argument("--matrices", default="", help="only these, e.g. talker.o,predictor.down")
    ap.add_argument("--calls", type=int, default=20, help="products per timed graph")
    ap.add_argument("--sweep", action="store_true", help="also sweep fp8 kernel configurations")
    ap.add_argument("--sweep-ms", default="8,32,128,256", help="rows the sweep times")
    ap.add_argument("--batches", default="1,128", help="decode batch sizes timed")
    ap.add_argument("--kv-len", type=int, default=256, help="occupied KV positions when timed")
    ap.add_argument("--replays", type=int, default=100, help="timed graph replays")
    ap.add_argument("--budget-s", type=float, default=200, help="skip sections after this")
    args = ap.parse_args(argv)
    args.budget = Budget(args.budget_s)
    args.dtype = "bfloat16" if args.device == "cuda" else "float32"
    args.m_list = [int(m) for m in args.ms.split(",") if m]
    args.sweep_m_list = [int(m) for m in args.sweep_ms.split(",") if m]
    args.batch_sizes = [int(b) for b in args.batches.split(",") if b]
    args.seeds, args.max_len = 1, 512  # fp8_pair.load_side's rows and KV length
    fp8_pair.prepare_device(args.device, ap.error)
    os.makedirs(args.out, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k not in ("out", "budget")}
    summary: dict = dict(env=machine_facts(args.device, REPO), config=config)
    raw: dict = dict(config=config)

    def dump() -> None:
        summary["wall_s"] = round(args.budget.elapsed_s(), 1)
        Path(args.out, "fp8_kernel.json").write_text(json.dumps(summary, indent=1, default=str))
        with gzip.open(Path(args.out, "fp8_kernel_samples.json.gz"), "wt") as f:
            json.dump(raw, f, default=str)

    dump()
    ckpt = ready_checkpoint(args.sizes, args)
    args.budget.log(f"checkpoint {ckpt}")
    # The sweep last: it stops at the time budget, the step figures come first.
    sections = [("products", products), ("steps", None)]
    if args.sweep:
        sections.append(("sweep", sweep))
    model = None
    for name, section in sections:
        try:
            if section is None:
                model = None
                gc.collect()
                steps(ckpt, args, summary, raw, dump)
            else:
                if model is None:
                    # load_side sizes its runner by the batches; none timed: one row.
                    rows = argparse.Namespace(**{**vars(args), "batch_sizes": [1]})
                    model = fp8_pair.load_side(ckpt, "bf16", rows).model
                section(model, args, summary, raw, dump)
        except Exception as e:
            summary.setdefault("errors", {})[name] = repr(e)
            summary.setdefault("tracebacks", {})[name] = traceback.format_exc()[-3000:]
            args.budget.log(f"{name}: FAILED", traceback.format_exc())
        dump()
    args.budget.log(f"wrote {args.out}/fp8_kernel.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
