#!/usr/bin/env python3
"""The streaming codec at batch scale on a GPU: graph replay per (batch bucket, frames).

Writes a real-size random speech tokenizer (official layout, as bench_codec.py does) unless
--tokenizer is given, loads it in bf16 with the convolutions on the Triton kernel
(codec.convs.use_kernels) and measures:
  1. correctness on the GPU first: streamed bf16 kernel audio (chunks 1, 2, 8, ...) of a few
     streams vs the float32 eager (torch) offline decode: SNR dB and max |error| of the
     PCM; the same for bf16 eager (what bf16 alone costs), and kernel graph == kernel eager;
  2. per frame count n: capture of every batch bucket (largest first, one pool) with its
     seconds and the peak memory it took; then per bucket B the replay time of a decode
     call (codec.decode: index/codes upload, graph, output copy; CUDA events, median) and
     audio seconds produced per second;
  3. for comparison, the eager torch path (cuDNN) graphed at a few (B, n).
Writes --out/codec_scale.json after every section (machine, versions, raw samples), prints
a table last, and skips what would start after --budget-s.

    PYTHONPATH=runtime python3 bench/codec_scale.py --out $OUT --budget-s 200
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import tempfile
import time
import traceback
from pathlib import Path

import torch
import triton
from bench_codec import SECONDS_PER_FRAME, timed  # this folder (the script's own)

from ttsfleet_runtime.checkpoint.speech_tokenizer_files import write_random_speech_tokenizer
from ttsfleet_runtime.codec import convs, load_speech_tokenizer
from ttsfleet_runtime.codec.streaming import StreamingCodec


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


def correctness(folder: Path, args, report: dict) -> None:
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (args.check_streams, args.check_frames, 16), generator=gen)
    codes = codes.to(device)
    out = report.setdefault("correctness", {})
    convs.use_eager()
    reference = load_speech_tokenizer(folder, device=device, dtype=torch.float32)
    offline = reference.decode(codes)
    del reference
    decoder = load_speech_tokenizer(folder, device=device, dtype=torch.bfloat16)
    bf16_eager = stream(StreamingCodec(decoder, args.check_streams, device), codes)
    convs.use_kernels()
    kernel = stream(StreamingCodec(decoder, args.check_streams, device), codes)
    graphed_codec = StreamingCodec(decoder, args.check_streams, device)
    graphed_codec.capture([args.check_streams], [1, 2, 8])
    graphed = stream(graphed_codec, codes)
    for name, got in (("bf16_eager", bf16_eager), ("bf16_kernel", kernel)):
        out[name] = {
            "snr_db": snr_db(offline, got),
            "max_abs_error": (got - offline).abs().max().item(),
            "finite": bool(torch.isfinite(got).all().item()),
        }
    out["kernel_graph_vs_eager_max_abs"] = (graphed - kernel).abs().max().item()
    out["reference_rms"] = offline.pow(2).mean().sqrt().item()


def scale(decoder, args, report: dict, t0: float) -> None:
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(1)
    top = max(args.batches)
    rows = report.setdefault("scale", [])
    for frames in args.frames:
        if time.monotonic() - t0 > args.budget_s:
            report.setdefault("skipped", []).append(f"scale n={frames}")
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
                graph = codec._graphs[(batch, frames)].graph
                replay = timed(graph.replay, args.iters)
                row["decode_ms"] = statistics.median(samples)
                row["replay_ms"] = statistics.median(replay)
                row["decode_samples_ms"] = [round(s, 4) for s in samples]
                row["audio_s_per_s"] = batch * frames * SECONDS_PER_FRAME / (row["decode_ms"] / 1e3)
            except Exception as exc:
                row["error"] = repr(exc)[:400]
            rows.append(row)
            print(
                json.dumps({k: v for k, v in row.items() if k != "decode_samples_ms"}), flush=True
            )
        codec = None  # frees its graphs and their pool
    torch.cuda.empty_cache()


def eager_baseline(decoder, args, report: dict, t0: float) -> None:
    """The torch (cuDNN) path on the same layout, graphed, for comparison."""
    device = torch.device("cuda")
    rows = report.setdefault("eager_torch", [])
    convs.use_eager()
    try:
        for batch, frames in ((1, 1), (32, 8), (128, 8)):
            if time.monotonic() - t0 > args.budget_s:
                report.setdefault("skipped", []).append(f"eager b={batch} n={frames}")
                continue
            row = {"batch": batch, "frames": frames}
            try:
                codec = StreamingCodec(decoder, batch, device)
                slots = [codec.open() for _ in range(batch)]
                codec.capture([batch], [frames])
                codes = torch.randint(0, 2048, (batch, frames, 16), device=device)
                for _ in range(3):
                    codec.decode(slots, codes)
                row["decode_ms"] = statistics.median(
                    timed(lambda: codec.decode(slots, codes), args.iters)  # noqa: B023
                )
                codec = None  # frees its graphs and their pool
            except Exception as exc:
                row["error"] = repr(exc)[:400]
            rows.append(row)
            torch.cuda.empty_cache()
    finally:
        convs.use_kernels()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, help="existing speech_tokenizer/ folder")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    parser.add_argument("--frames", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--check-streams", type=int, default=4)
    parser.add_argument("--check-frames", type=int, default=24)
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument("--no-eager", action="store_true", help="skip the cuDNN baseline")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    torch.backends.cudnn.benchmark = True
    report = {
        "benchmark": "codec_scale",
        "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": {
            "gpu": torch.cuda.get_device_name(),
            "host": platform.node(),
            "python": platform.python_version(),
        },
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        },
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
    sections = [("correctness", lambda: correctness(folder, args, report))]
    decoder = None

    def load():
        nonlocal decoder
        convs.use_kernels()
        decoder = load_speech_tokenizer(folder, device="cuda", dtype=torch.bfloat16)

    sections += [
        ("load", load),
        ("scale", lambda: scale(decoder, args, report, t0)),
    ]
    if not args.no_eager:
        sections.append(("eager_torch", lambda: eager_baseline(decoder, args, report, t0)))
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
    print(
        f"{'frames':>6} {'batch':>6} {'decode ms':>10} {'replay ms':>10} {'audio-s/s':>10} "
        f"{'capture s':>10} {'peak GiB':>9}"
    )
    for row in report.get("scale", []):
        print(
            f"{row['frames']:>6} {row['batch']:>6} {row.get('decode_ms', float('nan')):>10.3f} "
            f"{row.get('replay_ms', float('nan')):>10.3f} "
            f"{row.get('audio_s_per_s', float('nan')):>10.0f} "
            f"{row['capture_s_all_buckets']:>10.1f} {row['peak_bytes_all_buckets'] / 2**30:>9.2f}"
        )
    for row in report.get("eager_torch", []):
        print(f"eager torch b={row['batch']} n={row['frames']}: {row.get('decode_ms', row)}")
    print("wrote", path)


if __name__ == "__main__":
    main()
