#!/usr/bin/env python3
"""Micro-benchmark of the 25 Hz decoder's streaming chunks (DiT window, vocoder window,
a whole decode call) per batch size, on a GPU.

The decoder has random weights of the published speech tokenizer's size (the config
defaults; the same tokenizer serves the 0.6B and 1.7B talkers) unless --config names a
speech_tokenizer config.json. Per batch size B (--batches, default 1 8 32):
  - dit_b{B}: one DiT window batch (B blocks, 10 flow points, guidance doubling), eager
    and, on CUDA, as the captured graph (`StreamingDecoder25Hz.capture`);
  - vocoder_b{B}: one steady-state vocoder window batch (B blocks with their context);
  - step_b{B}: `StreamingDecoder25Hz.decode` of 12 codes per stream (one block each):
    ms per chunk and audio seconds per second.
Sections run in order; one that raises records its error and the rest still run; those
past --budget-s are skipped. JSON (machine, versions, options, raw samples) goes to
--out/codec25.json and a short table is printed last.

    PYTHONPATH=runtime python3 bench/codec25.py --out $OUT --budget-s 420
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from ttsfleet_runtime.benchmark import json_writer, log, report_start, run_sections, timed
from ttsfleet_runtime.codec25 import Decoder25Hz, SpeechTokenizer25HzConfig, StreamingDecoder25Hz


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered),
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
        "samples_ms": [round(s, 4) for s in samples],
    }


def build_decoder(args) -> Decoder25Hz:
    if args.config:
        with open(args.config) as f:
            config = SpeechTokenizer25HzConfig.from_dict(json.load(f))
    else:
        config = SpeechTokenizer25HzConfig()
    torch.manual_seed(0)
    decoder = Decoder25Hz(config).eval()
    return decoder.to(device=args.device, dtype=getattr(torch, args.dtype))


def warm_streams(decoder, batch: int, args) -> tuple[StreamingDecoder25Hz, list[int]]:
    """`batch` streams past their first block, so every later block has full context."""
    streaming = StreamingDecoder25Hz(decoder, max_streams=batch, device=args.device)
    slots = [streaming.open(None) for _ in range(batch)]
    codes = torch.randint(0, decoder.config.mel_generator.num_embeds, (batch, 36))
    streaming.decode(slots, codes)
    return streaming, slots


def dit_section(decoder, batch: int, args) -> dict:
    streaming, _ = warm_streams(decoder, batch, args)
    config = decoder.config.mel_generator
    width = streaming.window_frames
    device, dtype = streaming.device, streaming.noise.dtype
    inputs = (
        torch.randint(0, config.num_embeds, (batch, width // config.repeats), device=device),
        torch.randn(batch, width, config.mel_dim, device=device, dtype=dtype),
        torch.randn(batch, config.enc_dim, device=device, dtype=dtype),
        torch.randn(batch, config.enc_emb_dim, device=device, dtype=dtype),
        torch.ones(batch, width, dtype=torch.bool, device=device),
    )
    result = {"batch": batch, "window_frames": width}
    with torch.inference_mode():
        eager = decoder.dit.sample(*inputs)
        result["eager"] = summary(timed(lambda: decoder.dit.sample(*inputs), args.iters))
        if streaming.device.type == "cuda":
            started = time.perf_counter()
            streaming.capture([batch])
            result["capture_s"] = time.perf_counter() - started
            run = streaming._graph_for(batch).run
            result["graph_vs_eager_max_abs"] = float((run(*inputs) - eager).abs().max())
            result["graph"] = summary(timed(lambda: run(*inputs), args.iters))
    return result


def vocoder_section(decoder, batch: int, args) -> dict:
    streaming, _ = warm_streams(decoder, batch, args)
    frames = streaming.vocoder_left + streaming.block_frames + streaming.vocoder_right
    mel = (
        torch.randn(batch, frames, decoder.config.vocoder.mel_dim, device=streaming.device).to(
            streaming.noise.dtype
        )
        - 4
    )
    with torch.inference_mode():
        stats = summary(timed(lambda: decoder.bigvgan(mel), args.iters))
    return {"batch": batch, "window_frames": frames, "block_frames": streaming.block_frames} | stats


def step_section(decoder, batch: int, args) -> dict:
    streaming, slots = warm_streams(decoder, batch, args)
    if streaming.device.type == "cuda" and not args.eager:
        streaming.capture([batch])
    codes = torch.randint(0, decoder.config.mel_generator.num_embeds, (batch, 12))
    stats = summary(timed(lambda: streaming.decode(slots, codes), args.iters))
    audio_s = batch * 12 / streaming.frame_rate
    return {
        "batch": batch,
        "codes_per_chunk": 12,
        "graphs": streaming.device.type == "cuda" and not args.eager,
        "audio_s_per_s": audio_s / (stats["median_ms"] / 1e3),
        "state_bytes_per_stream": streaming.state_bytes_per_stream,
    } | stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", help="a speech_tokenizer config.json (default: published size)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float32", help="the reference decodes in float32")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs in the step section")
    ap.add_argument("--budget-s", type=float, default=420.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    results = report_start(args)
    dump = json_writer(os.path.join(args.out, "codec25.json"), results)
    decoder = build_decoder(args)
    todo = []
    for batch in args.batches:
        todo += [
            (f"dit_b{batch}", lambda b=batch: dit_section(decoder, b, args)),
            (f"vocoder_b{batch}", lambda b=batch: vocoder_section(decoder, b, args)),
            (f"step_b{batch}", lambda b=batch: step_section(decoder, b, args)),
        ]
    run_sections(
        todo,
        results["sections"],
        started=started,
        budget_s=args.budget_s,
        dump=dump,
        log=log,
        describe=lambda r: {k: v for k, v in r.items() if not isinstance(v, (dict, list))},
    )
    print(f"{'section':<14}{'median ms':>12}{'graph ms':>10}{'audio s/s':>11}")
    for key, r in results["sections"].items():
        eager = r.get("eager", r)
        graph = r.get("graph", {}).get("median_ms")
        print(
            f"{key:<14}{eager.get('median_ms', float('nan')):>12.2f}"
            f"{graph if graph is not None else float('nan'):>10.2f}"
            f"{r.get('audio_s_per_s', float('nan')):>11.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
