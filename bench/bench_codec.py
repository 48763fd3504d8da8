#!/usr/bin/env python3
"""Micro-benchmark of the streaming codec decoder (12 Hz speech tokenizer) on a GPU.

Writes a real-size random speech tokenizer (official layout) unless --tokenizer is
given, then measures, per dtype:
  - offline decode of --frames frames at batch 1,
  - one streaming decode step per (batch, frames) bucket, eager and CUDA-graphed,
    as latency and audio seconds produced per second,
  - correctness on the device: streamed == offline, graphed == eager,
  - state memory per stream.
Writes JSON (machine, versions, config, raw samples) to --out/codec_bench.json.

    PYTHONPATH=runtime python3 bench/bench_codec.py --out $OUT
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ttsfleet_runtime.benchmark import timed
from ttsfleet_runtime.checkpoint.speech_tokenizer_files import write_random_speech_tokenizer
from ttsfleet_runtime.codec import convs, load_speech_tokenizer
from ttsfleet_runtime.codec.streaming import StreamingCodec
from ttsfleet_runtime.engine.frame_decoder import timing_12hz
from ttsfleet_runtime.settings import SETTINGS


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered),
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
        "min_ms": ordered[0],
        "samples_ms": [round(s, 4) for s in samples],
    }


def measure_step(decoder, batch: int, frames: int, gen, args, row: dict) -> None:
    """One streaming step of `batch` streams x `frames` frames, eager and graphed."""
    device = decoder._device()
    chunk = torch.randint(0, 2048, (batch, frames, 16), generator=gen).to(device)
    for mode in ("eager", "graph") if device.type == "cuda" else ("eager",):
        codec = StreamingCodec(decoder, max_streams=batch, device=device)
        slots = [codec.open() for _ in range(batch)]
        if mode == "graph":
            t0 = time.perf_counter()
            codec.capture([batch], [frames])
            row["capture_s"] = time.perf_counter() - t0
        for _ in range(3):
            codec.decode(slots, chunk)
        # timed() calls it within this iteration, so the loop variables are the current ones.
        stats = summary(timed(lambda: codec.decode(slots, chunk), args.iters))  # noqa: B023
        stats["audio_s_per_s"] = batch * frames * args.frame_s / (stats["median_ms"] / 1e3)
        row[mode] = stats
    if device.type != "cuda":
        return
    # Graph replay == eager, on the same history of chunks from fresh slots.
    eager = StreamingCodec(decoder, max_streams=batch, device=device)
    graphed = StreamingCodec(decoder, max_streams=batch, device=device)
    graphed.capture([batch], [frames])
    e_slots = [eager.open() for _ in range(batch)]
    g_slots = [graphed.open() for _ in range(batch)]
    row["graph_vs_eager_max_abs"] = max(
        float((eager.decode(e_slots, chunk) - graphed.decode(g_slots, chunk)).abs().max())
        for _ in range(3)
    )


def bench_dtype(folder: Path, dtype: torch.dtype, args) -> dict:
    device = torch.device(args.device)
    decoder = load_speech_tokenizer(folder, device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(0)
    result: dict = {"dtype": str(dtype).removeprefix("torch.")}

    # Offline decode, batch 1.
    codes = torch.randint(0, 2048, (1, args.frames, 16), generator=gen).to(device)
    offline = decoder.decode(codes)
    offline_ms = summary(timed(lambda: decoder.decode(codes), 5))
    result["offline_b1"] = {"frames": args.frames, **offline_ms}

    # Streaming == offline on the device (chunks 1, 2, 4, ... then the rest).
    codec = StreamingCodec(decoder, max_streams=max(args.batches), device=device)
    slot, pieces, start, n = codec.open(), [], 0, 1
    while start < args.frames:
        pieces.append(codec.decode([slot], codes[:, start : start + n]))
        start, n = start + n, n * 2
    codec.close(slot)
    result["stream_vs_offline_max_abs"] = float((torch.cat(pieces, 1) - offline).abs().max())
    result["state_bytes_per_stream"] = codec.state_bytes_per_stream

    steps = []
    for frames in args.chunk_frames:
        for batch in args.batches:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            row = {"batch": batch, "frames": frames}
            try:
                measure_step(decoder, batch, frames, gen, args, row)
            except Exception as exc:  # keep the other buckets' numbers
                row["error"] = repr(exc)
            if device.type == "cuda":
                row["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
            print(
                json.dumps(
                    {k: v for k, v in row.items() if k not in ("eager", "graph")}
                    | {
                        mode: {k: v for k, v in row.get(mode, {}).items() if k != "samples_ms"}
                        for mode in ("eager", "graph")
                    }
                ),
                flush=True,
            )
            steps.append(row)
    result["steps"] = steps
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, help="existing speech_tokenizer/ folder")
    parser.add_argument(
        "--size",
        default="real",
        choices=["real", "tiny"],
        help="size of the random tokenizer written when --tokenizer is not given",
    )
    parser.add_argument("--device", default="cuda", help="cpu only checks the script runs")
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64, 128])
    parser.add_argument("--chunk-frames", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument(
        "--torch-convs", action="store_true", help="cuDNN convolutions, not the Triton kernel"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    cuda = args.device.startswith("cuda")
    if cuda and not args.torch_convs:
        convs.use(SETTINGS["codec_conv_route"].default)  # as a GPU server does

    folder = args.tokenizer
    if folder is None:
        scratch = Path(tempfile.mkdtemp())
        folder = write_random_speech_tokenizer(scratch / "speech_tokenizer", args.size)
    args.frame_s = timing_12hz(folder).frame_s  # audio seconds of one frame
    report = {
        "benchmark": "codec",
        "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": {
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "host": platform.node(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "convolutions": "torch"
        if args.torch_convs or not cuda
        else SETTINGS["codec_conv_route"].default,
        "results": [],
    }
    for name in args.dtypes:
        report["results"].append(bench_dtype(folder, getattr(torch, name), args))
        (args.out / "codec_bench.json").write_text(json.dumps(report, indent=1))
    print("wrote", args.out / "codec_bench.json")


if __name__ == "__main__":
    main()
