#!/usr/bin/env python3
"""The streaming codec at batch scale on a GPU, per convolution route: graph replay per
(batch bucket, frames).

Writes a real-size random speech tokenizer (the official layout) unless
--tokenizer is given, loads it in bf16 and, for each route of speech_tokenizer.rate12.convs
(--routes:
"triton" = every dense convolution on the Triton kernel, "cudnn" = every one on cuDNN
channels-last + the fused epilogue, "gemm" = every one as a cuBLAS product over the input
windows + the fused epilogue, "routed" = Triton or the product per `route_for` (a server
runs its `codec_conv_route` setting); "eager" = the torch reference path) measures:
  1. correctness on the GPU first: streamed bf16 audio (chunks 1, 2, 8, ...) of a few
     streams vs the float32 eager (torch) offline decode: SNR dB and max |error| of the
     PCM (bf16 eager too: what bf16 alone costs), and graph replay == eager on the route;
  2. per convolution call of the decoder at (B, n) = (1, 1), (8, 2), (32, 2), (128, 8):
     the Triton kernel, cuDNN and the product (each call with its real epilogue and
     history, graphed: do_bench_cudagraph); per (B, n) the sum of each route and of
     "routed" (`route_for`'s choice per call: `per_layer_totals`);
  3. per route and frame count n: capture of every batch bucket (largest first, one pool)
     with its seconds and the peak memory it took; then per bucket B the replay time of a
     decode call (codec.decode: index/codes upload, graph, output copy; CUDA events,
     median) and audio seconds produced per second.
With --compare-unfused, 1 and 3 also run the "triton" and "routed" routes with every
residual unit as its two convolution calls (`ConvRoute.fuse_residual_units` off; named
"... unfused units", rows say "fused_units"): what the fused unit (kernels/residual_unit.py)
saves, and that it changes no audio.
With --profile, after 3: per route, torch.profiler's kernel totals of one eager decode at
128 streams x 8 frames, largest first (where the codec's time goes, convolutions or not);
last, so that the profiler cannot weigh on the timings.
Writes --out/codec_scale.json after every section (machine, versions, raw samples), prints
tables last, and skips what would start after --budget-s.

    PYTHONPATH=runtime python3 bench/codec_scale.py --out $OUT --budget-s 230
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import statistics
import tempfile
import time
import traceback
from pathlib import Path

import torch
import triton

from ttsfleet_runtime.bench.common import machine_facts, timed
from ttsfleet_runtime.checkpoint.speech_tokenizer_files import write_random_speech_tokenizer
from ttsfleet_runtime.engine.frame_decoder import timing_12hz
from ttsfleet_runtime.speech_tokenizer.rate12 import convs, load_speech_tokenizer
from ttsfleet_runtime.speech_tokenizer.rate12.streaming import StreamingCodec


def snr_db(reference: torch.Tensor, got: torch.Tensor) -> float:
    noise = (got.double() - reference.double()).pow(2).sum().item()
    signal = reference.double().pow(2).sum().item()
    return 10 * math.log10(signal / max(noise, 1e-30))


def stream(codec: StreamingCodec, codes: torch.Tensor) -> torch.Tensor:
    """All streams of codes [B, T, 16] through fresh slots in chunks 1, 2, 8, 1, 2, 8, ..."""
    slots = [codec.open() for _ in range(codes.shape[0])]
    pieces, start, i = [], 0, 0
    while start < codes.shape[1]:
        n = min((1, 2, 8)[i % 3], codes.shape[1] - start)
        pieces.append(codec.decode(slots, codes[:, start : start + n]))
        start, i = start + n, i + 1
    for slot in slots:
        codec.close(slot)
    return torch.cat(pieces, dim=1)


def correctness(folder: Path, args, report: dict, t0: float) -> None:
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (args.check_streams, args.check_frames, 16), generator=gen)
    codes = codes.to(device)
    out = report.setdefault("correctness", {})
    out_routes = out.setdefault("routes", {})
    reference = load_speech_tokenizer(folder, device=device, dtype=torch.float32)
    offline = reference.decode(codes)
    del reference
    out["reference_rms"] = offline.pow(2).mean().sqrt().item()
    decoder = load_speech_tokenizer(folder, device=device, dtype=torch.bfloat16)

    def compare(got: torch.Tensor) -> dict:
        return {
            "snr_db": snr_db(offline, got),
            "max_abs_error": (got - offline).abs().max().item(),
            "finite": bool(torch.isfinite(got).all().item()),
        }

    out["bf16_eager"] = compare(stream(StreamingCodec(decoder, args.check_streams, device), codes))
    for route, fused_units in route_variants(args):
        name = route if fused_units else f"{route} unfused units"
        if time.monotonic() - t0 > args.budget_s:
            report.setdefault("skipped", []).append(f"correctness {name}")
            continue
        entry = out_routes.setdefault(name, {})
        try:
            on_route = decoder.on_route(conv_route(route, fused_units))
            eager = stream(StreamingCodec(on_route, args.check_streams, device), codes)
            graphed_codec = StreamingCodec(on_route, args.check_streams, device)
            graphed_codec.capture([args.check_streams], [1, 2, 8])
            graphed = stream(graphed_codec, codes)
            entry.update(compare(eager))
            entry["graph_vs_eager_max_abs"] = (graphed - eager).abs().max().item()
        except Exception:
            entry["error"] = traceback.format_exc(limit=4)
        print(f"correctness {name}: {json.dumps(entry)}", flush=True)


def conv_route(route: str, fused_units: bool = True) -> convs.ConvRoute:
    """The route named `route`, its residual units fused or as two calls."""
    return dataclasses.replace(convs.ROUTES[route], fuse_residual_units=fused_units)


def route_variants(args) -> list[tuple[str, bool]]:
    """(route, residual units fused) to measure: every route as a server runs it, then with
    --compare-unfused the routes that fuse them ("triton", "routed") with the two calls."""
    variants = [(route, True) for route in args.routes]
    if args.compare_unfused:
        variants += [(r, False) for r in args.routes if r in ("triton", "routed")]
    return variants


def scale(decoder, route: str, args, report: dict, t0: float, fused_units: bool = True) -> None:
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(1)
    top = max(args.batches)
    rows = report.setdefault("scale", [])
    decoder = decoder.on_route(conv_route(route, fused_units))
    try:
        for frames in args.frames:
            if time.monotonic() - t0 > args.budget_s:
                report.setdefault("skipped", []).append(f"scale {route} n={frames}")
                continue
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            codec = StreamingCodec(decoder, top, device)
            slots = [codec.open() for _ in range(top)]
            t_capture = time.perf_counter()
            codec.capture(args.batches, [frames])
            capture_s = time.perf_counter() - t_capture
            peak = torch.cuda.max_memory_allocated() - before
            codes = torch.randint(0, 2048, (top, frames, 16), generator=gen).to(device)
            for batch in sorted(args.batches):
                row = {
                    "route": route,
                    "fused_units": fused_units,
                    "frames": frames,
                    "batch": batch,
                    "capture_s_all_buckets": capture_s,
                    "peak_bytes_all_buckets": peak,
                    "state_bytes": codec.state_bytes_per_stream * top,
                }
                try:
                    chunk = codes[:batch]
                    used = slots[:batch]
                    for _ in range(3):
                        codec.decode(used, chunk)
                    samples = timed(lambda: codec.decode(used, chunk), args.iters)  # noqa: B023
                    replay = timed(
                        lambda: codec.replay_graph(batch, frames),  # noqa: B023
                        args.iters,
                    )
                    row["decode_ms"] = statistics.median(samples)
                    row["replay_ms"] = statistics.median(replay)
                    row["decode_samples_ms"] = [round(s, 4) for s in samples]
                    seconds = batch * frames * args.frame_s
                    row["audio_s_per_s"] = seconds / (row["decode_ms"] / 1e3)
                except Exception as exc:
                    row["error"] = repr(exc)[:400]
                rows.append(row)
                shown = {k: v for k, v in row.items() if k != "decode_samples_ms"}
                print(json.dumps(shown), flush=True)
            codec = None  # frees its graphs and their pool
    finally:
        torch.cuda.empty_cache()


PROFILE_POINT = (128, 8)  # (streams, frames): the codec_ms_b128_n8


def profile(decoder, route: str, report: dict) -> None:
    """Where one decode call's GPU time goes on a route: torch.profiler's kernel totals of
    eager calls at PROFILE_POINT (eager, so that every kernel is attributed: a graph replays
    the same kernels without the launches), per call, largest first."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    batch, frames = PROFILE_POINT
    calls = 3
    device = torch.device("cuda")
    codec = StreamingCodec(decoder.on_route(conv_route(route)), batch, device)
    slots = [codec.open() for _ in range(batch)]
    codes = torch.randint(0, 2048, (batch, frames, 16), device=device)
    for _ in range(2):  # compiles, and lets cuDNN pick its algorithms
        codec.decode(slots, codes)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            codec.decode(slots, codes)
        torch.cuda.synchronize()
    kernels = []
    for event in prof.key_averages():
        # Self time: a kernel's own; the op that launched it has none (no double count).
        device_us = getattr(event, "self_device_time_total", 0) or 0
        if device_us > 0:
            kernels.append(
                {
                    "kernel": event.key[:160],
                    "ms_per_call": device_us / 1e3 / calls,
                    "launches_per_call": event.count / calls,
                }
            )
    kernels.sort(key=lambda k: -k["ms_per_call"])
    entry = {
        "batch": batch,
        "frames": frames,
        "kernel_ms_per_call": sum(k["ms_per_call"] for k in kernels),
        "kernels": kernels[:40],
    }
    report.setdefault("profile", {})[route] = entry
    print(f"profile {route}: {entry['kernel_ms_per_call']:.2f} ms of kernels per call", flush=True)
    for k in kernels[:15]:
        print(f"  {k['ms_per_call']:8.3f} ms x{k['launches_per_call']:4.0f}  {k['kernel'][:100]}")


def record_calls(decoder, batch: int, frames: int) -> list[dict]:
    """Every dense convolution call of one decoder step at (batch, frames): the layer, its
    input shape and epilogue (the step runs on the eager convolutions, recorded)."""
    names = {id(m): name for name, m in decoder.named_modules()}
    calls = []

    def recorder(layer, x, state, *, residual=None, activation=None, emit_raw=True):
        calls.append(
            {
                "layer": layer,
                "name": names.get(id(layer), "?"),
                "shape": tuple(x.shape),
                "residual": residual is not None,
                "activation": activation,
                "emit_raw": emit_raw,
            }
        )
        return convs.conv_eager(
            layer, x, state, residual=residual, activation=activation, emit_raw=emit_raw
        )

    codes = torch.randint(0, 2048, (batch, frames, 16), device=decoder.device)
    recording = decoder.on_route(convs.ConvRoute("recording", recorder))
    with torch.inference_mode():
        recording.step(codes, recording.initial_state(batch))
    return calls


def time_call(fn, call: dict, x: torch.Tensor, residual: torch.Tensor | None) -> float:
    """Median ms of one recorded convolution call on a route, replayed in a CUDA graph."""
    layer = call["layer"]
    state = {}
    if layer.context:
        state[layer.state_key] = x.new_zeros(x.shape[0], layer.context, x.shape[2])

    def run():
        fn(
            layer,
            x,
            state,
            residual=residual,
            activation=call["activation"],
            emit_raw=call["emit_raw"],
        )

    with torch.inference_mode():
        run()  # compiles, and lets cuDNN pick its algorithm, outside the graph
        torch.cuda.synchronize()
        return triton.testing.do_bench_cudagraph(run, rep=20, return_mode="median")


# The routes a convolution call can take, timed one against another per layer.
LAYER_ROUTES = {"triton": convs.conv_kernel, "cudnn": convs.conv_cudnn, "gemm": convs.conv_gemm}
LAYER_POINTS = ((1, 1), (8, 2), (32, 2), (128, 8))  # (streams, frames) a server decodes


def per_layer(decoder, args, report: dict, t0: float) -> None:
    """Every distinct convolution call on each route of LAYER_ROUTES, graphed."""
    rows = report.setdefault("per_layer", [])
    dtype, device = decoder.dtype, decoder.device
    for batch, frames in LAYER_POINTS:
        seen = set()
        for call in record_calls(decoder, batch, frames):
            layer = call["layer"]
            key = tuple(layer.kernel_weight.shape[::-1])  # (N, Cin, taps)
            dedupe = (key, call["shape"], call["residual"], call["activation"] is not None)
            if dedupe in seen:
                continue
            seen.add(dedupe)
            if time.monotonic() - t0 > args.budget_s:
                report.setdefault("skipped", []).append(f"per_layer {call['name']} b={batch}")
                continue
            b, length, cin = call["shape"]
            row = {
                "batch": batch,
                "frames": frames,
                "layer": call["name"],
                "key": list(key),
                "rows": b * length,
                "samples": length,  # per stream
                "residual": call["residual"],
                "activation": call["activation"] is not None,
                "emit_raw": call["emit_raw"],
            }
            x = torch.randn(b, length, cin, device=device).to(dtype)
            cout = layer.kernel_weight.shape[2] // layer.upsampling
            residual = (
                torch.randn(b, length * layer.upsampling, cout, device=device).to(dtype)
                if call["residual"]
                else None
            )
            for route, fn in LAYER_ROUTES.items():
                try:
                    row[f"{route}_ms"] = time_call(fn, call, x, residual)
                except Exception as exc:
                    row[f"{route}_error"] = repr(exc)[:300]
            rows.append(row)
            print(json.dumps(row), flush=True)


def per_layer_totals(rows: list[dict]) -> list[dict]:
    """Per (streams, frames): the summed ms of every convolution call on each route, on
    "routed" (each call on the route `route_for` gives it) and on the faster of the Triton
    kernel and the product per call (what a perfect rule between them would reach). The
    sums count each distinct call once (residual units repeat at three dilations)."""
    totals: dict[tuple[int, int], dict] = {}
    for row in rows:
        entry = totals.setdefault(
            (row["batch"], row["frames"]), {"batch": row["batch"], "frames": row["frames"]}
        )
        timed_routes = {r: row.get(f"{r}_ms") for r in LAYER_ROUTES}
        for route, ms in timed_routes.items():
            if ms is not None:
                entry[f"{route}_ms"] = entry.get(f"{route}_ms", 0.0) + ms
        triton_ms, gemm_ms = timed_routes["triton"], timed_routes["gemm"]
        if triton_ms is not None and gemm_ms is not None:
            route = convs.route_for(row["samples"])
            chosen = gemm_ms if route == "gemm" else triton_ms
            entry["routed_ms"] = entry.get("routed_ms", 0.0) + chosen
            entry["best_of_triton_gemm_ms"] = entry.get("best_of_triton_gemm_ms", 0.0) + min(
                triton_ms, gemm_ms
            )
    return list(totals.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, help="existing speech_tokenizer/ folder")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    parser.add_argument("--frames", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--check-streams", type=int, default=4)
    parser.add_argument("--check-frames", type=int, default=24)
    parser.add_argument("--budget-s", type=float, default=230.0)
    parser.add_argument(
        "--routes",
        nargs="+",
        default=["triton", "gemm", "routed"],
        choices=sorted(convs.ROUTES),
        help="convolution routes to measure (eager: the torch reference path)",
    )
    parser.add_argument("--no-per-layer", action="store_true", help="skip section 3")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="last, per route: kernel totals of one decode at 128 streams x 8 frames",
    )
    parser.add_argument("--no-correctness", action="store_true", help="skip section 1")
    parser.add_argument(
        "--compare-unfused",
        action="store_true",
        help="sections 1 and 3 again for triton/routed with the residual units as two calls",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    torch.backends.cudnn.benchmark = True
    facts = machine_facts("cuda", Path(__file__).resolve().parents[1])
    report = {
        "benchmark": "codec_scale",
        "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": facts,
        # The versions as this JSON has always listed them (cuDNN: the codec's convolutions).
        "versions": {k: facts[k] for k in ("torch", "triton", "cuda")}
        | {"cudnn": torch.backends.cudnn.version()},
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    path = args.out / "codec_scale.json"

    def save():
        report["elapsed_s"] = time.monotonic() - t0
        path.write_text(json.dumps(report, indent=1))

    folder = args.tokenizer
    if folder is None:
        folder = write_random_speech_tokenizer(
            Path(tempfile.mkdtemp()) / "speech_tokenizer", "real"
        )
    args.frame_s = timing_12hz(folder).frame_s  # audio seconds of one frame
    sections = []
    if not args.no_correctness:
        sections.append(("correctness", lambda: correctness(folder, args, report, t0)))
    decoder = None

    def load():
        nonlocal decoder
        decoder = load_speech_tokenizer(folder, device="cuda", dtype=torch.bfloat16)

    sections.append(("load", load))
    if not args.no_per_layer:
        sections.append(("per_layer", lambda: per_layer(decoder, args, report, t0)))
    for route, fused_units in route_variants(args):
        name = f"scale {route}" + ("" if fused_units else " unfused units")
        sections.append(
            (name, lambda r=route, f=fused_units: scale(decoder, r, args, report, t0, f))
        )
    if args.profile:  # last: see the module docstring
        for route in args.routes:
            sections.append((f"profile {route}", lambda r=route: profile(decoder, r, report)))
    for name, run in sections:
        t_section = time.monotonic()
        try:
            run()
        except Exception:
            report.setdefault("errors", {})[name] = traceback.format_exc(limit=6)
            print(f"section {name} failed:\n{report['errors'][name]}", flush=True)
        report.setdefault("section_s", {})[name] = time.monotonic() - t_section
        save()

    print("\ncorrectness:", json.dumps(report.get("correctness")))
    per_layer_rows = report.get("per_layer", [])
    if per_layer_rows:
        fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else "-"  # noqa: E731
        print(
            f"\n{'B':>3} {'n':>2} {'layer':30} {'samples':>7} {'rows':>6} "
            + " ".join(f"{r + ' ms':>9}" for r in LAYER_ROUTES)
        )
        for row in per_layer_rows:
            print(
                f"{row['batch']:>3} {row['frames']:>2} {row['layer'][:30]:30} {row['samples']:>7} "
                f"{row['rows']:>6} "
                + " ".join(f"{fmt(row.get(r + '_ms')):>9}" for r in LAYER_ROUTES)
            )
        report["per_layer_totals"] = per_layer_totals(per_layer_rows)
        save()
        print("\nsums of the distinct calls (routed: convs.route_for per call)")
        for entry in report["per_layer_totals"]:
            print(json.dumps(entry))
    print(
        f"\n{'route':>7} {'units':>7} {'frames':>6} {'batch':>6} {'decode ms':>10} {'replay ms':>10} "
        f"{'audio-s/s':>10} {'capture s':>10} {'peak GiB':>9}"
    )
    for row in report.get("scale", []):
        print(
            f"{row['route']:>7} {'fused' if row.get('fused_units', True) else 'two':>7} "
            f"{row['frames']:>6} {row['batch']:>6} "
            f"{row.get('decode_ms', float('nan')):>10.3f} "
            f"{row.get('replay_ms', float('nan')):>10.3f} "
            f"{row.get('audio_s_per_s', float('nan')):>10.0f} "
            f"{row['capture_s_all_buckets']:>10.1f} {row['peak_bytes_all_buckets'] / 2**30:>9.2f}"
        )
    print("wrote", path)


if __name__ == "__main__":
    main()
