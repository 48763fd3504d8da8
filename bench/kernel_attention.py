#!/usr/bin/env python3
"""GPU micro-benchmark of the decode attention and QK-norm + RoPE + KV-write kernels
(ttsfleet_runtime/kernels) against the path they replace.

Sections (each runs even if another fails; the JSON is always written):
  - attention: talker shapes (H=16, K=8, d=128), B in {1, 8, 32, 128} x view length L in
    {256, 1024, 4096}, row lengths ragged just below L, plus L=4096 with rows near 256
    (one graph over the whole cache serving short rows). Variants: ours with the default
    split count, ours at each forced split count, and today's SDPA with the additive mask
    over the fixed view (mask built once outside the timed graph, as the engine did once a
    step). Correctness vs float32 SDPA on the GPU, and a captured graph replayed after the
    lengths tensor changed in place (the point: one graph serves every length).
  - predictor_attention: the code predictor's 16-long cache, B in {1, 32, 128}, every row
    attending to g + 1 in {2, 16} keys.
  - rope_kv: qk_norm_rope_write vs today's torch.compile'd qk_norm_rope + index_put writes
    (and the eager functions), talker B in {1, 8, 32, 128} and predictor B in {1, 32, 128};
    checked against the eager path, the whole cache compared.
Timing: each variant is captured in one CUDA graph of CALLS calls cycling over as many
distinct layer caches as fit in a memory budget; L2 is flushed before each replay; CUDA
events around each replay; the per-call median is reported.

    PYTHONPATH=runtime python3 bench/kernel_attention.py --out $OUT
    TRITON_INTERPRET=1 PYTHONPATH=runtime python3 bench/kernel_attention.py --smoke --out /tmp/x
      (CPU smoke run of every code path: tiny shapes, no graphs, no compile)

Writes --out/kernel_attention.json and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import math
import platform
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from ttsfleet_runtime.benchmark import GraphTimer, relative_error
from ttsfleet_runtime.kernels.decode_attention import decode_attention, sm_count, split_count
from ttsfleet_runtime.kernels.rope_kv import qk_norm_rope_write
from ttsfleet_runtime.model.layers import RotaryTable, decode_mask, qk_norm_rope_eager

HEADS, KV_HEADS, HEAD_DIM = 16, 8, 128
PREDICTOR_LEN = 16
ROPE_THETA = 1e6
EPS = 1e-6
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}


@dataclasses.dataclass
class Config:
    batches: tuple = (1, 8, 32, 128)
    lengths: tuple = (256, 1024, 4096)
    short_rows: int = 256  # the extra case: L = max(lengths) with rows near this
    predictor_batches: tuple = (1, 32, 128)
    predictor_keys: tuple = (2, 16)
    split_sweep: tuple = (1, 2, 4, 8, 16, 32)
    rope_cache_len: int = 512
    calls: int = 28  # calls per captured graph (the talker's layers)
    cache_budget_bytes: int = 4 << 30
    iters: int = 30
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    head_dim: int = HEAD_DIM


SMOKE = Config(
    batches=(1, 3),
    lengths=(40,),
    short_rows=9,
    predictor_batches=(2,),
    split_sweep=(1, 3),
    rope_cache_len=24,
    calls=3,
    iters=2,
    heads=4,
    kv_heads=2,
    head_dim=32,
)


def layer_caches(cfg: Config, dtype, device, gen, batch: int, length: int):
    """Random K and V caches [layers, B, K, length, d]: as many distinct layers as the
    graph has calls, within the memory budget (large shapes overflow L2 with one)."""
    shape = (batch, cfg.kv_heads, length, cfg.head_dim)
    per_layer = 2 * math.prod(shape) * torch.finfo(dtype).bits // 8
    layers = max(1, min(cfg.calls, cfg.cache_budget_bytes // per_layer))
    k_all = torch.randn((layers, *shape), generator=gen).to(device, dtype)
    v_all = torch.randn((layers, *shape), generator=gen).to(device, dtype)
    return k_all, v_all


def ragged_lengths(batch: int, near: int, limit: int, gen: torch.Generator) -> torch.Tensor:
    """Row lengths in (near - near/8, near], one row exactly `near`, all in [1, limit]."""
    spread = max(1, near // 8)
    lengths = near - torch.randint(0, spread, (batch,), generator=gen)
    lengths[0] = near
    return lengths.clamp(1, limit)


def sdpa_reference(q, k_cache, v_cache, lengths) -> torch.Tensor:
    """Today's decode attention in float32: SDPA with the engine's additive mask."""
    B, H, d = q.shape
    K, L = k_cache.shape[1], k_cache.shape[2]
    mask = decode_mask(lengths - 1, L, torch.float32)
    qg = q.float().reshape(B, K, H // K, d)
    return F.scaled_dot_product_attention(qg, k_cache.float(), v_cache.float(), attn_mask=mask)


def bench_attention_case(timer, cfg, dtype, device, gen, batch, view_len, lengths) -> dict:
    H, K, d = cfg.heads, cfg.kv_heads, cfg.head_dim
    k_all, v_all = layer_caches(cfg, dtype, device, gen, batch, view_len)
    layers = len(k_all)
    q = torch.randn(batch, H, d, generator=gen).to(device, dtype)
    lengths = lengths.to(device)
    row = {
        "batch": batch,
        "view_len": view_len,
        "lengths_min": int(lengths.min()),
        "lengths_max": int(lengths.max()),
        "layers_in_graph": layers,
        "default_splits": split_count(batch, K, view_len, sm_count(device)),
        "variants": {},
    }
    ref = sdpa_reference(q, k_all[0], v_all[0], lengths).reshape(batch, H, d)
    calls = [i % layers for i in range(cfg.calls)]
    tolerance = TOLERANCE[dtype]

    def ours(splits):
        out = torch.empty_like(q)
        err = relative_error(decode_attention(q, k_all[0], v_all[0], lengths, splits=splits), ref)
        fns = [
            (lambda i=i: decode_attention(q, k_all[i], v_all[i], lengths, out=out, splits=splits))
            for i in calls
        ]
        return err, fns, out

    variants = {"ours": None} | {f"ours_splits_{s}": s for s in cfg.split_sweep}
    for name, splits in variants.items():
        err, fns, out = ours(splits)
        stats = timer.time(timer.capture(fns), len(fns))
        row["variants"][name] = {"rel_err": err, "ok": err < tolerance, **stats}
        if name == "ours":
            row["graph_relength"] = relength_check(timer, q, k_all, v_all, lengths, out, gen)

    mask = decode_mask(lengths - 1, view_len, dtype)
    qg = q.reshape(batch, K, H // K, d)

    def sdpa(i):
        return F.scaled_dot_product_attention(qg, k_all[i], v_all[i], attn_mask=mask)

    err = relative_error(sdpa(0).reshape(batch, H, d), ref)
    stats = timer.time(timer.capture([(lambda i=i: sdpa(i)) for i in calls]), len(calls))
    row["variants"]["sdpa_masked"] = {"rel_err": err, "ok": err < tolerance, **stats}
    best = min(
        (v["median_ms"], k) for k, v in row["variants"].items() if k.startswith("ours_splits")
    )
    row["best_split"] = {"variant": best[1], "median_ms": best[0]}
    row["speedup_vs_sdpa"] = (
        row["variants"]["sdpa_masked"]["median_ms"] / row["variants"]["ours"]["median_ms"]
    )
    return row


def relength_check(timer, q, k_all, v_all, lengths, out, gen) -> dict:
    """Capture once, change the lengths tensor in place, replay: the output must follow."""
    view_len = k_all.shape[3]
    replay = timer.capture([lambda: decode_attention(q, k_all[0], v_all[0], lengths, out=out)])
    saved = lengths.clone()
    errors = []
    for near in (1, max(1, view_len // 3), view_len):
        new = ragged_lengths(len(lengths), near, view_len, gen).to(lengths.device)
        lengths.copy_(new)
        replay()
        ref = sdpa_reference(q, k_all[0], v_all[0], lengths).reshape(out.shape)
        errors.append(relative_error(out, ref))
    lengths.copy_(saved)
    return {"rel_errs": errors, "ok": max(errors) < TOLERANCE[q.dtype]}


def bench_rope_case(timer, cfg, dtype, device, gen, batch, cache_len, positions) -> dict:
    H, K, d = cfg.heads, cfg.kv_heads, cfg.head_dim
    k_all, v_all = layer_caches(cfg, dtype, device, gen, batch, cache_len)
    layers = len(k_all)
    qkv = (3 * torch.randn(layers, batch, (H + 2 * K) * d, generator=gen)).to(device, dtype)
    q_weight, k_weight = (1 + 0.2 * torch.randn(2, d, generator=gen)).to(device, dtype)
    rope = RotaryTable(d, ROPE_THETA, cache_len).to(device)
    positions = positions.to(device)
    # Today's path looked cos/sin up once a step, shared by the layers: done outside timing.
    cos = rope.cos[positions].to(dtype)[:, None, None]
    sin = rope.sin[positions].to(dtype)[:, None, None]
    rows = torch.arange(batch, device=device)
    calls = [i % layers for i in range(cfg.calls)]

    def today(norm_rope, i):
        q, k, v = qkv[i].split([H * d, K * d, K * d], dim=-1)
        q, k = norm_rope(
            q.view(batch, 1, H, d), k.view(batch, 1, K, d), q_weight, k_weight, cos, sin, EPS
        )
        k_all[i][rows, :, positions] = k[:, :, 0]
        v_all[i][rows, :, positions] = v.view(batch, K, d)
        return q[:, :, 0]

    def ours(i):
        return qk_norm_rope_write(
            qkv[i], q_weight, k_weight, rope.cos, rope.sin, positions, k_all[i], v_all[i], EPS
        )

    row = {"batch": batch, "cache_len": cache_len, "layers_in_graph": layers, "variants": {}}
    # Correctness on layer 0: q and the whole cache vs the eager path.
    k_before, v_before = k_all[0].clone(), v_all[0].clone()
    q_ref = today(qk_norm_rope_eager, 0)
    k_ref, v_ref = k_all[0].clone(), v_all[0].clone()
    k_all[0].copy_(k_before)
    v_all[0].copy_(v_before)
    q_ours = ours(0)
    written = torch.zeros(k_ref.shape, dtype=torch.bool, device=device)
    written[rows, :, positions] = True
    row["check"] = {
        "q_rel_err": relative_error(q_ours, q_ref),
        "k_written_rel_err": relative_error(k_all[0][written], k_ref[written]),
        "k_rest_equal": bool(torch.equal(k_all[0][~written], k_ref[~written])),
        "v_equal": bool(torch.equal(v_all[0], v_ref)),
    }
    c = row["check"]
    c["ok"] = (
        c["q_rel_err"] < TOLERANCE[dtype]
        and c["k_written_rel_err"] < TOLERANCE[dtype]
        and c["k_rest_equal"]
        and c["v_equal"]
    )

    variants = {"ours": ours, "eager": lambda i: today(qk_norm_rope_eager, i)}
    if timer.cuda:
        variants["compiled"] = lambda i: today(compiled_qk_norm_rope(), i)
    for name, fn in variants.items():
        try:
            fns = [(lambda i=i, fn=fn: fn(i)) for i in calls]
            row["variants"][name] = timer.time(timer.capture(fns), len(fns))
        except Exception as exc:  # noqa: BLE001 - one variant's failure is data
            row["variants"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    base = row["variants"].get("compiled", row["variants"]["eager"])
    if "median_ms" in base and "median_ms" in row["variants"]["ours"]:
        row["speedup_vs_today"] = base["median_ms"] / row["variants"]["ours"]["median_ms"]
    return row


@functools.cache
def compiled_qk_norm_rope():
    """Today's GPU qk_norm_rope: compiled as engine/fusion.py compiles it."""
    return torch.compile(qk_norm_rope_eager, dynamic=True, fullgraph=False)


def run_section(results: dict, name: str, cases) -> None:
    """Run each (label, thunk) of a section; a failure is recorded and the rest go on."""
    rows = results.setdefault(name, [])
    for label, thunk in cases:
        try:
            rows.append(thunk())
        except Exception as exc:  # noqa: BLE001 - keep the other cases
            traceback.print_exc()
            rows.append({"case": label, "error": f"{type(exc).__name__}: {exc}"})
            results["errors"].append(f"{name} {label}: {type(exc).__name__}: {exc}")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def attention_cases(timer, cfg, dtype, device, gen):
    for batch in cfg.batches:
        for view_len in cfg.lengths:
            yield (
                f"B={batch} L={view_len}",
                lambda b=batch, n=view_len: bench_attention_case(
                    timer, cfg, dtype, device, gen, b, n, ragged_lengths(b, n, n, gen)
                ),
            )
        longest = max(cfg.lengths)
        yield (
            f"B={batch} L={longest} rows~{cfg.short_rows}",
            lambda b=batch, n=longest: bench_attention_case(
                timer, cfg, dtype, device, gen, b, n, ragged_lengths(b, cfg.short_rows, n, gen)
            ),
        )


def predictor_cases(timer, cfg, dtype, device, gen):
    for batch in cfg.predictor_batches:
        for keys in cfg.predictor_keys:
            lengths = torch.full((batch,), keys)
            yield (
                f"B={batch} keys={keys}",
                lambda b=batch, n=lengths: bench_attention_case(
                    timer, cfg, dtype, device, gen, b, PREDICTOR_LEN, n
                ),
            )


def rope_cases(timer, cfg, dtype, device, gen):
    for batch in cfg.batches:
        positions = torch.randint(0, cfg.rope_cache_len, (batch,), generator=gen)
        yield (
            f"talker B={batch}",
            lambda b=batch, p=positions: bench_rope_case(
                timer, cfg, dtype, device, gen, b, cfg.rope_cache_len, p
            ),
        )
    for batch in cfg.predictor_batches:
        positions = torch.full((batch,), 5)
        yield (
            f"predictor B={batch}",
            lambda b=batch, p=positions: bench_rope_case(
                timer, cfg, dtype, device, gen, b, PREDICTOR_LEN, p
            ),
        )


def table(results: dict) -> str:
    lines = ["attention (per call, ms)          ours  split  best(split)   sdpa   x     err  relen"]
    for section in ("attention", "predictor_attention"):
        lines.append(f"-- {section}")
        for r in results.get(section, []):
            if "error" in r:
                lines.append(f"{r['case']:<30} ERROR {r['error'][:60]}")
                continue
            v = r["variants"]
            label = f"B={r['batch']} L={r['view_len']} live={r['lengths_min']}-{r['lengths_max']}"
            best = r["best_split"]
            lines.append(
                f"{label:<30} {v['ours']['median_ms']:7.4f} {r['default_splits']:5d}"
                f" {best['median_ms']:7.4f}({best['variant'].rsplit('_', 1)[1]:>2})"
                f" {v['sdpa_masked']['median_ms']:7.4f} {r['speedup_vs_sdpa']:5.2f}"
                f" {v['ours']['rel_err']:.1e} {'ok' if r['graph_relength']['ok'] else 'BAD'}"
            )
    lines.append("rope_kv (per call, ms)            ours   compiled  eager    x     q_err  ok")
    for r in results.get("rope_kv", []):
        if "error" in r:
            lines.append(f"{r['case']:<30} ERROR {r['error'][:60]}")
            continue
        v = r["variants"]

        def ms(name, v=v):
            return f"{v[name]['median_ms']:8.4f}" if "median_ms" in v.get(name, {}) else "     n/a"

        label = f"B={r['batch']} cache={r['cache_len']}"
        lines.append(
            f"{label:<30} {ms('ours')} {ms('compiled')} {ms('eager')}"
            f" {r.get('speedup_vs_today', float('nan')):5.2f}"
            f" {r['check']['q_rel_err']:.1e} {'ok' if r['check']['ok'] else 'BAD'}"
        )
    if results["errors"]:
        lines.append(f"{len(results['errors'])} error(s): see 'errors' in the JSON")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, CPU interpreter")
    args = parser.parse_args()
    cfg = SMOKE if args.smoke else Config()
    if args.iters:
        cfg = dataclasses.replace(cfg, iters=args.iters)
    dtype = getattr(torch, args.dtype)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        "machine": {
            "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
            "sms": sm_count(device),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(),
        },
        "config": dataclasses.asdict(cfg) | {"dtype": args.dtype},
        "errors": [],
    }
    path = args.out / "kernel_attention.json"
    try:
        timer = GraphTimer(device, cfg.iters)
        gen = torch.Generator().manual_seed(0)
        run_section(results, "attention", attention_cases(timer, cfg, dtype, device, gen))
        run_section(results, "predictor_attention", predictor_cases(timer, cfg, dtype, device, gen))
        run_section(results, "rope_kv", rope_cases(timer, cfg, dtype, device, gen))
    except Exception as exc:  # noqa: BLE001 - the JSON is written whatever happens
        traceback.print_exc()
        results["errors"].append(f"{type(exc).__name__}: {exc}")
    finally:
        path.write_text(json.dumps(results, indent=1))
    print(table(results))
    print(f"wrote {path}")
    bad = [
        r
        for s in ("attention", "predictor_attention")
        for r in results.get(s, [])
        if "error" in r
        or not all(v["ok"] for v in r["variants"].values())
        or not r["graph_relength"]["ok"]
    ] + [r for r in results.get("rope_kv", []) if "error" in r or not r["check"]["ok"]]
    return 1 if bad or results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
