#!/usr/bin/env python3
"""Sweep of kernels.conv1d block configs on the real codec decoder's convolutions; writes
the table.

For every dense convolution shape of the real 12 Hz decoder (columns N, input channels,
taps; dilation 1 stands for 3 and 9) in the order of its share of the work:
  1. Triton compiles of every candidate config run first, in parallel worker processes
     (they fill Triton's disk cache; the main process then loads them),
  2. correctness on the GPU of every candidate at the timed size (vs a float32 cuDNN conv
     of the same bf16 inputs; relative max error),
  3. time per call (triton.testing.do_bench, median) at --batch streams x --frames frames
     with the layer's real epilogue (bias, residual, SnakeBeta outputs), against cuDNN on
     the same bf16 problem: conv1d NCL (yesterday's layout) and conv2d channels_last
     (convolution only: no activation, no history gather),
  4. the best config re-timed at B in {1, 32} x frames {1, 2} (latency shapes).

Writes --out/kernel_conv1d.json (machine, versions, every sample) and --out/conv1d_table.py
(the TABLE to paste into runtime/ttsfleet_runtime/kernels/conv1d.py), then prints a table.
Stops starting new shapes after --budget-s.

With --units, instead: the residual units of the decoder's last two blocks (96 and 192
channels) as one launch of kernels/residual_unit.py against the two conv1d calls they
replace (each with its table config), at --batch x --frames: the fused kernel's candidate
configs compiled in parallel, checked against the two calls on the GPU (bf16: the same
roundings, so a few elements a rounding step apart at most), timed (do_bench, every
sample kept) at dilation 1 with raw + activated outputs (units 1 and 2 of a block), the
best also at dilations 3 and 9 and activated only (unit 3). Writes
--out/kernel_residual_unit.json and --out/residual_unit_table.py (residual_unit.TABLE).

    PYTHONPATH=runtime python3 bench/kernel_conv1d.py --out $OUT --budget-s 200
    PYTHONPATH=runtime python3 bench/kernel_conv1d.py --units --out $OUT --budget-s 200
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.testing

from ttsfleet_runtime.kernels import residual_unit
from ttsfleet_runtime.kernels.conv1d import ConvConfig, causal_conv1d, default_config

DTYPE = torch.bfloat16
TOLERANCE = 2e-2  # max |error| / max |reference| (bf16 output rounding ~4e-3)


@dataclass(frozen=True)
class Shape:
    name: str
    n: int  # output columns (stride * Cout for a transposed conv)
    cin: int
    taps: int
    samples_per_frame: int  # input samples of one stream per frame
    act: bool  # SnakeBeta epilogue
    raw: bool  # raw output written
    residual: bool
    layers: int  # how many layers of the decoder have this shape


# The real decoder (codec/config.py: latent 1024, decoder_dim 1536, rates 8, 5, 4, 3),
# heaviest first: a residual unit's k7 conv is 7/8 of its block's work.
SHAPES = [
    Shape("block3 ru.conv1 (192, k7)", 192, 192, 7, 640, True, False, False, 3),
    Shape("block2 ru.conv1 (384, k7)", 384, 384, 7, 160, True, False, False, 3),
    Shape("block4 ru.conv1 (96, k7)", 96, 96, 7, 1920, True, False, False, 3),
    Shape("block1 ru.conv1 (768, k7)", 768, 768, 7, 32, True, False, False, 3),
    Shape("block4 ru.conv2 (96, k1)", 96, 96, 1, 1920, True, True, True, 3),
    Shape("block3 ru.conv2 (192, k1)", 192, 192, 1, 640, True, True, True, 3),
    Shape("block2 ru.conv2 (384, k1)", 384, 384, 1, 160, True, True, True, 3),
    Shape("block1 ru.conv2 (768, k1)", 768, 768, 1, 32, True, True, True, 3),
    Shape("block2 upsample 768->384 x5", 5 * 384, 768, 2, 32, True, True, False, 1),
    Shape("block3 upsample 384->192 x4", 4 * 192, 384, 2, 160, True, True, False, 1),
    Shape("block1 upsample 1536->768 x8", 8 * 768, 1536, 2, 4, True, True, False, 1),
    Shape("block4 upsample 192->96 x3", 3 * 96, 192, 2, 640, True, True, False, 1),
    Shape("decoder.0 conv 1024->1536 k7", 1536, 1024, 7, 4, True, False, False, 1),
    Shape("upsample 1024 x2", 2 * 1024, 1024, 1, 1, False, True, False, 2),
    Shape("pre_conv 512->1024 k3", 1024, 512, 3, 1, False, True, False, 1),
    Shape("final conv 96->1 k7", 1, 96, 7, 1920, False, True, False, 1),
]

CANDIDATES = [
    (128, 128, 64, 8, 3),
    (128, 128, 32, 8, 4),
    (128, 64, 64, 4, 3),
    (128, 64, 32, 4, 4),
    (64, 128, 64, 4, 3),
    (64, 64, 64, 4, 3),
    (256, 64, 32, 8, 3),
    (256, 128, 32, 8, 3),
    (128, 32, 64, 4, 3),
    (128, 256, 64, 8, 3),
    (64, 32, 32, 4, 3),
    # Deeper pipelines, and 32-channel steps, which divide 96 channels (no masked half).
    (128, 64, 64, 4, 4),
    (128, 128, 64, 8, 4),
    (256, 64, 64, 8, 3),
    (64, 64, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (256, 128, 64, 8, 3),
    # Small tiles (mma.sync below 64 samples), more programs per SM: the fused residual
    # units' sweep found the smallest tiles fastest for 96 and 192 channels.
    (32, 32, 32, 2, 3),
    (32, 64, 32, 4, 3),
    (64, 32, 32, 4, 4),
    (64, 64, 32, 4, 3),
]


def candidates(shape: Shape) -> list[ConvConfig]:
    cap_n = max(16, triton.next_power_of_2(shape.n))
    cap_k = max(16, triton.next_power_of_2(shape.cin))
    out = {default_config(shape.n, shape.cin)}
    for t, n, k, w, s in CANDIDATES:
        out.add(ConvConfig(t, min(n, cap_n), min(k, cap_k), w, s))
    return sorted(out, key=lambda c: tuple(asdict(c).values()))


def inputs(shape: Shape, batch: int, frames: int, seed: int = 0) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    length = shape.samples_per_frame * frames
    context = shape.taps - 1  # dilation 1

    def rand(*dims, scale=1.0):
        return (scale * torch.randn(*dims, generator=g, device="cuda")).to(DTYPE)

    return {
        "x": rand(batch, length, shape.cin),
        "weight": rand(shape.taps, shape.cin, shape.n, scale=(shape.taps * shape.cin) ** -0.5),
        "history": rand(batch, context, shape.cin) if context else None,
        "bias": rand(shape.n),
        "residual": rand(batch, length, shape.n) if shape.residual else None,
        "activation": (rand(shape.n).abs() + 0.5, rand(shape.n).abs() + 0.1) if shape.act else None,
    }


def call(shape: Shape, data: dict, config: ConvConfig | None, emit_raw: bool = False):
    """The layer's real epilogue (raw output too when `emit_raw`: the correctness check)."""
    return causal_conv1d(
        data["x"],
        data["weight"],
        data["history"],
        bias=data["bias"],
        residual=data["residual"],
        activation=data["activation"],
        emit_raw=emit_raw or shape.raw or not shape.act,
        config=config,
    )


def _compile_one(task) -> str | None:
    """Worker process: compile (and run once, tiny) one (shape, config)."""
    shape, config = task
    try:
        torch.cuda.set_device(0)
        call(shape, inputs(shape, 1, 1), config)
        torch.cuda.synchronize()
        return None
    except Exception:
        return traceback.format_exc(limit=3)


def compile_in_workers(worker, tasks: list, args, report: dict, t0: float) -> None:
    """Triton's compiles of every task first, in parallel processes (they fill its disk
    cache; the main process then loads them)."""
    try:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.workers) as pool:
            failures = [f for f in pool.map(worker, tasks) if f]
        report["compile"] = {"tasks": len(tasks), "failures": failures[:5]}
    except Exception as exc:
        report["compile"] = {"error": repr(exc)}
    report["compile_s"] = time.monotonic() - t0
    print(f"compiled {len(tasks)} kernels in {report['compile_s']:.0f}s", flush=True)


def reference(shape: Shape, data: dict) -> torch.Tensor:
    """float32 cuDNN conv of the same bf16 inputs (+ bias, + residual), raw output."""
    x, w = data["x"].float(), data["weight"].float()
    full = x if data["history"] is None else torch.cat([data["history"].float(), x], 1)
    y = F.conv1d(full.transpose(1, 2), w.permute(2, 1, 0), data["bias"].float())
    y = y.transpose(1, 2)
    return y if data["residual"] is None else y + data["residual"].float()


def cudnn_times(shape: Shape, data: dict) -> dict:
    """cuDNN on the same bf16 problem (convolution only)."""
    x, w = data["x"], data["weight"]
    full = x if data["history"] is None else torch.cat([data["history"], x], 1)
    w_oik = w.permute(2, 1, 0).contiguous()
    ncl = full.transpose(1, 2).contiguous()
    out = {}
    out["cudnn_conv1d_ncl_ms"] = triton.testing.do_bench(
        lambda: F.conv1d(ncl, w_oik, data["bias"]), return_mode="median"
    )
    nhwc = ncl[:, :, None, :].contiguous(memory_format=torch.channels_last)
    w4 = w_oik[:, :, None, :].contiguous(memory_format=torch.channels_last)
    out["cudnn_conv2d_channels_last_ms"] = triton.testing.do_bench(
        lambda: F.conv2d(nhwc, w4, data["bias"]), return_mode="median"
    )
    return out


def sweep_shape(shape: Shape, args, row: dict) -> None:
    data = inputs(shape, args.batch, args.frames)
    ref = reference(shape, data)
    scale = ref.abs().max().item()
    length = data["x"].shape[1]
    flop = 2 * args.batch * length * shape.n * shape.cin * shape.taps
    row["gflop"] = flop / 1e9
    results = []
    for config in candidates(shape):
        entry = {"config": asdict(config)}
        try:
            raw, act = call(shape, data, config, emit_raw=True)
            entry["max_rel_error"] = (raw.float() - ref).abs().max().item() / scale
            if act is not None:
                entry["act_finite"] = bool(torch.isfinite(act).all().item())
            ok = entry["max_rel_error"] <= TOLERANCE and entry.get("act_finite", True)
            entry["correct"] = ok
            if ok:
                ms = triton.testing.do_bench(
                    lambda c=config: call(shape, data, c), return_mode="median"
                )
                entry["ms"] = ms
                entry["tflops"] = flop / ms / 1e9
        except Exception as exc:
            entry["error"] = repr(exc)[:300]
        results.append(entry)
    row["candidates"] = results
    timed = [e for e in results if "ms" in e]
    if timed:
        best = min(timed, key=lambda e: e["ms"])
        row["best"] = best
        default = asdict(default_config(shape.n, shape.cin))
        row["default_ms"] = next((e["ms"] for e in timed if e["config"] == default), None)
        config = ConvConfig(**best["config"])
        latency = {}
        for batch in (1, 32):
            for frames in (1, 2):
                small = inputs(shape, batch, frames)
                latency[f"b{batch}_n{frames}_ms"] = triton.testing.do_bench(
                    lambda d=small: call(shape, d, config), return_mode="median"
                )
        row["best_latency"] = latency
    try:
        row.update(cudnn_times(shape, data))
    except Exception as exc:
        row["cudnn_error"] = repr(exc)[:300]


def table_text(rows: list[dict], device: str) -> str:
    lines = [
        f"# Measured by bench/kernel_conv1d.py on {device}, {datetime.date.today()}:",
        "TABLE: dict[tuple[int, int, int], tuple[int, int, int, int, int]] = {",
    ]
    for row in rows:
        best = row.get("best")
        if not best:
            continue
        c = best["config"]
        key = (row["shape"]["n"], row["shape"]["cin"], row["shape"]["taps"])
        value = (c["block_t"], c["block_n"], c["block_k"], c["num_warps"], c["num_stages"])
        cudnn = row.get("cudnn_conv2d_channels_last_ms")
        note = f"{row['shape']['name']}: {best['ms'] * 1e3:.0f} us, {best['tflops']:.0f} TFLOP/s"
        if cudnn is not None:
            note += f"; cuDNN NHWC {cudnn * 1e3:.0f} us"
        lines.append(f"    {key}: {value},  # {note}")
    lines.append("}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Unit:
    name: str
    channels: int
    samples_per_frame: int  # input samples of one stream per frame


# The residual units that fit one tile (residual_unit.MAX_CHANNELS), three per block.
UNITS = [
    Unit("block4 residual unit (96)", 96, 1920),
    Unit("block3 residual unit (192)", 192, 640),
]

# (block_t, block_n = conv2's column chunk, block_k, warps, stages); sm_90 compiles of 4
# warps at 128 samples spill for 192 channels (residual_unit.MAX_CHANNELS' comment).
UNIT_CANDIDATES = [
    (128, 32, 32, 8, 3),
    (128, 32, 32, 8, 4),
    (128, 32, 64, 8, 3),
    (128, 64, 32, 8, 4),
    (128, 64, 64, 8, 2),
    (128, 64, 64, 8, 3),
    (128, 64, 64, 8, 4),
    (128, 128, 64, 8, 3),
    (64, 32, 32, 4, 3),
    (64, 32, 64, 8, 3),
    (64, 64, 64, 4, 3),
    (64, 64, 64, 8, 3),
    (64, 128, 64, 8, 3),
    (256, 32, 32, 8, 3),
    # Around the first sweep's winners (64-sample tiles, 4 warps) and below them.
    (64, 32, 32, 4, 2),
    (64, 32, 32, 4, 4),
    (64, 64, 32, 4, 3),
    (64, 64, 64, 4, 4),
    (32, 32, 32, 2, 3),
    (32, 32, 32, 4, 3),
    (32, 64, 32, 4, 3),
    (32, 64, 64, 4, 3),
]


def unit_candidates(unit: Unit) -> list[ConvConfig]:
    width = max(16, triton.next_power_of_2(unit.channels))
    out = {residual_unit.default_config(unit.channels)}
    for t, n, k, w, st in UNIT_CANDIDATES:
        out.add(ConvConfig(t, min(n, width), min(k, width), w, st))
    return sorted(out, key=lambda c: tuple(asdict(c).values()))


def unit_inputs(
    unit: Unit, batch: int, frames: int, dilation: int, device: str = "cuda", seed: int = 0
) -> dict:
    g = torch.Generator(device=device).manual_seed(seed)
    c, length = unit.channels, unit.samples_per_frame * frames

    def rand(*dims, scale=1.0):
        return (scale * torch.randn(*dims, generator=g, device=device)).to(DTYPE)

    def snake():
        return (rand(c).abs() + 0.5, rand(c).abs() + 0.1)

    return {
        "x": rand(batch, length, c),
        "x_act": rand(batch, length, c),
        "history": rand(batch, 6 * dilation, c),
        "w1": rand(7, c, c, scale=(7 * c) ** -0.5),
        "b1": rand(c),
        "act2": snake(),
        "w2": rand(1, c, c, scale=c**-0.5),
        "b2": rand(c),
        "next_activation": snake(),
        "dilation": dilation,
    }


def two_calls(data: dict, emit_raw: bool):
    """What the codec ran before the fusion: conv1 + snake, then conv2 + x + snake."""
    _, h = causal_conv1d(
        data["x_act"],
        data["w1"],
        data["history"],
        dilation=data["dilation"],
        bias=data["b1"],
        activation=data["act2"],
        emit_raw=False,
    )
    return causal_conv1d(
        h,
        data["w2"],
        bias=data["b2"],
        residual=data["x"],
        activation=data["next_activation"],
        emit_raw=emit_raw,
    )


def fused(data: dict, config: ConvConfig | None, emit_raw: bool):
    d = data
    return residual_unit.residual_unit(
        *(d[k] for k in ("x", "x_act", "history", "w1", "b1", "act2", "w2", "b2")),
        d["next_activation"],
        emit_raw=emit_raw,
        dilation=d["dilation"],
        config=config,
    )


def unit_errors(data: dict, config: ConvConfig | None) -> dict:
    """The fused outputs against the two calls': max |difference| / max |two calls| and
    the share of elements that differ at all (the same roundings: a few, by one step)."""
    out = {}
    for name, got, want in zip(
        ("raw", "act"), fused(data, config, True), two_calls(data, True), strict=True
    ):
        diff = (got.float() - want.float()).abs()
        out[f"{name}_max_rel_error"] = diff.max().item() / want.float().abs().max().item()
        out[f"{name}_differing"] = (diff > 0).float().mean().item()
        out[f"{name}_finite"] = bool(torch.isfinite(got).all().item())
    out["correct"] = all(
        out[f"{n}_max_rel_error"] <= TOLERANCE and out[f"{n}_differing"] <= 0.01
        for n in ("raw", "act")
    ) and all(out[f"{n}_finite"] for n in ("raw", "act"))
    return out


def _bench(fn) -> dict:
    samples = triton.testing.do_bench(fn, return_mode="all")
    return {"ms": float(torch.tensor(samples).median().item()), "samples_ms": samples}


def _compile_unit(task) -> str | None:
    """Worker process: compile (and run once, tiny) one (unit, config)."""
    unit, config = task
    try:
        torch.cuda.set_device(0)
        fused(unit_inputs(unit, 1, 1, 1), config, True)
        torch.cuda.synchronize()
        return None
    except Exception:
        return traceback.format_exc(limit=3)


def sweep_unit(unit: Unit, args, row: dict) -> None:
    data = unit_inputs(unit, args.batch, args.frames, 1)
    for emit_raw in (True, False):
        key = "raw_act" if emit_raw else "act"
        row[f"two_calls_{key}"] = _bench(lambda e=emit_raw: two_calls(data, e))
    row["conv1_alone"] = _bench(
        lambda: causal_conv1d(
            data["x_act"],
            data["w1"],
            data["history"],
            bias=data["b1"],
            activation=data["act2"],
            emit_raw=False,
        )
    )
    results = []
    for config in unit_candidates(unit):
        entry = {"config": asdict(config)}
        try:
            entry.update(unit_errors(data, config))
            if entry["correct"]:
                entry.update(_bench(lambda c=config: fused(data, c, True)))
        except Exception as exc:
            entry["error"] = repr(exc)[:300]
        results.append(entry)
    row["candidates"] = results
    timed = [e for e in results if "ms" in e]
    if not timed:
        return
    best = min(timed, key=lambda e: e["ms"])
    row["best"] = best
    config = ConvConfig(**best["config"])
    row["best_act_only"] = _bench(lambda: fused(data, config, False))
    for dilation in (3, 9):
        dilated = unit_inputs(unit, args.batch, args.frames, dilation)
        row[f"dilation{dilation}"] = {
            "two_calls_raw_act": _bench(lambda d=dilated: two_calls(d, True)),
            "fused_raw_act": _bench(lambda d=dilated: fused(d, config, True)),
        }
    # A block's three units: two with both outputs, the last activated only.
    two = 2 * row["two_calls_raw_act"]["ms"] + row["two_calls_act"]["ms"]
    one = 2 * best["ms"] + row["best_act_only"]["ms"]
    row["block_units_ms"] = {"two_calls": two, "fused": one, "saved": two - one}


def unit_table_text(rows: list[dict], device: str) -> str:
    lines = [
        f"# Measured by bench/kernel_conv1d.py --units on {device}, {datetime.date.today()}:",
        "TABLE: dict[int, tuple[int, int, int, int, int]] = {",
    ]
    for row in rows:
        best = row.get("best")
        if not best:
            continue
        c = best["config"]
        value = (c["block_t"], c["block_n"], c["block_k"], c["num_warps"], c["num_stages"])
        two = row["two_calls_raw_act"]["ms"]
        note = f"{row['unit']['name']}: {best['ms'] * 1e3:.0f} us (two calls {two * 1e3:.0f})"
        lines.append(f"    {row['unit']['channels']}: {value},  # {note}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def sweep_rows(items, key: str, compile_one, candidates_of, sweep, args, report, t0, save):
    """Compile every (item, candidate) in worker processes, then sweep the items in order
    while --budget-s lasts: one report row each (the item under `key`), saved after each."""
    pairs = [(item, c) for item in items for c in candidates_of(item)]
    compile_in_workers(compile_one, pairs, args, report, t0)
    save()
    for item in items:
        if time.monotonic() - t0 > args.budget_s:
            report.setdefault("skipped", []).append(item.name)
            continue
        row = {key: asdict(item)}
        try:
            sweep(item, args, row)
        except Exception as exc:
            row["error"] = repr(exc)[:500]
        report["rows"].append(row)
        save()
        best = row.get("best", {})
        print(item.name, best.get("config"), best.get("ms"), flush=True)


def run_units(args, report: dict, t0: float, save) -> None:
    sweep_rows(UNITS, "unit", _compile_unit, unit_candidates, sweep_unit, args, report, t0, save)
    print(f"\n{'unit':28} {'two calls':>9} {'conv1':>7} {'fused':>7} {'block saved':>11}  config")
    for row in report["rows"]:
        best = row.get("best", {})
        fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "-"  # noqa: E731
        print(
            f"{row['unit']['name']:28} {fmt(row.get('two_calls_raw_act', {}).get('ms')):>9} "
            f"{fmt(row.get('conv1_alone', {}).get('ms')):>7} {fmt(best.get('ms')):>7} "
            f"{fmt(row.get('block_units_ms', {}).get('saved')):>11}  "
            f"{tuple(best['config'].values()) if best else row.get('error', '')}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument("--workers", type=int, default=12, help="parallel compile processes")
    parser.add_argument(
        "--units",
        action="store_true",
        help="time the fused residual units of blocks 3 and 4 against their two calls",
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    device = torch.cuda.get_device_name()
    report = {
        "benchmark": "kernel_residual_unit" if args.units else "kernel_conv1d",
        "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": {"gpu": device, "host": platform.node(), "python": platform.python_version()},
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": [],
    }
    torch.backends.cudnn.benchmark = True
    if args.units:

        def save_units():
            report["elapsed_s"] = time.monotonic() - t0
            (args.out / "kernel_residual_unit.json").write_text(json.dumps(report, indent=1))
            (args.out / "residual_unit_table.py").write_text(
                unit_table_text(report["rows"], device)
            )

        run_units(args, report, t0, save_units)
        save_units()
        print("wrote", args.out / "kernel_residual_unit.json", args.out / "residual_unit_table.py")
        return

    def save():
        report["elapsed_s"] = time.monotonic() - t0
        (args.out / "kernel_conv1d.json").write_text(json.dumps(report, indent=1))
        (args.out / "conv1d_table.py").write_text(table_text(report["rows"], device))

    sweep_rows(SHAPES, "shape", _compile_one, candidates, sweep_shape, args, report, t0, save)
    save()

    print(
        f"\n{'shape':34} {'GFLOP':>7} {'best ms':>8} {'TFLOP/s':>8} {'default':>8} "
        f"{'cuDNN NCL':>9} {'cuDNN NHWC':>10}  config"
    )
    for row in report["rows"]:
        best = row.get("best", {})
        fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "-"  # noqa: E731
        print(
            f"{row['shape']['name']:34} {row.get('gflop', 0):7.1f} {fmt(best.get('ms')):>8} "
            f"{best.get('tflops', 0):8.0f} {fmt(row.get('default_ms')):>8} "
            f"{fmt(row.get('cudnn_conv1d_ncl_ms')):>9} "
            f"{fmt(row.get('cudnn_conv2d_channels_last_ms')):>10}  "
            f"{tuple(best['config'].values()) if best else row.get('error', '')}"
        )
    print("wrote", args.out / "kernel_conv1d.json", args.out / "conv1d_table.py")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
