"""Benchmark of the engine on a GPU (`ttsfleet-runtime bench`, or `bench engine`; `ttsfleet
bench` in a checkout is the same): random-weight checkpoints
at real dimensions (or a given checkpoint), fixed length (EOS suppressed),
everything through the public engine API (scheduler, CUDA graphs, streaming
codec included).

Per model size: batch-1 ms per frame and RTF, time to first audio (TTFA),
throughput at several batch sizes with the codec included, memory per stream,
and the raw decode-step time of the captured graphs (no codec, no Python loop).
Last, per size, the graphs `ttsfleet serve` captures at start with its default
settings and the seconds that capture takes (`server_graphs`).
Writes `ours.json` into --out, progressively. `--parity` first checks that the
graphed GPU path generates what the eager CPU path does (`graph_parity.py`).
A run's state (its results, clock and budget) lives in `EngineRun`; nothing is kept at
module level, so two runs in one process are independent.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

from .common import (
    TEXT,
    Budget,
    add_tokenizer_rate_argument,
    checkpoint_path,
    machine_facts,
    ready_checkpoint,
)

# The tree this module runs from, when it is a checkout (its commit goes into the
# result); an installed wheel has none, and the result says so.
CHECKOUT = Path(__file__).resolve().parents[3]


def request(frames: int, seed: int, text: str = TEXT, timestamps: bool = False):
    """Exactly `frames` frames of `text`, spoken by the built-in speaker ryan (with
    word timestamps when asked: their cost is the engine thread's)."""
    from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest

    return SynthesisRequest(
        text=text,
        voice="ryan",
        language="english",
        params=SamplingParams(seed=seed, max_frames=frames, min_frames=frames),
        timestamps=timestamps,
    )


async def run_one(engine, frames: int, seed: int, timestamps: bool = False) -> dict:
    t_submit = time.monotonic()
    stream = engine.submit(request(frames, seed, timestamps=timestamps))
    arrivals = []
    n_frames = 0
    audio_s = 0.0
    async for chunk in stream:
        arrivals.append((time.monotonic(), chunk))
        n_frames += chunk.frames
        audio_s += chunk.duration_s
    first_t, first = arrivals[0]
    last_t = arrivals[-1][0]
    after_first = n_frames - first.frames
    return dict(
        frames=n_frames,
        audio_s=round(audio_s, 4),
        ttfa_ms=round((first_t - t_submit) * 1000, 2),
        ttfa_from_admission_ms=round((first.t_emitted - first.t_admitted) * 1000, 2),
        queue_ms=round((first.t_admitted - t_submit) * 1000, 2),
        # Steady state: frames after the first chunk over the time they took.
        ms_per_frame=round((last_t - first_t) * 1000 / max(1, after_first), 3),
        total_s=round(last_t - t_submit, 4),
        rtf=round((last_t - t_submit) / audio_s, 4),
        chunks=len(arrivals),
        max_gap_ms=round(
            max((b[0] - a[0]) * 1000 for a, b in zip(arrivals, arrivals[1:], strict=False)), 2
        )
        if len(arrivals) > 1
        else None,
    )


async def run_batch(engine, batch: int, frames: int, timestamps: bool = False) -> dict:
    t0 = time.monotonic()
    results = await asyncio.gather(
        *(run_one(engine, frames, 1000 + i, timestamps) for i in range(batch))
    )
    wall = time.monotonic() - t0
    audio_s = sum(r["audio_s"] for r in results)
    return dict(
        batch=batch,
        frames=frames,
        wall_s=round(wall, 4),
        audio_s_per_s=round(audio_s / wall, 2),
        worst_stream_rtf=max(r["rtf"] for r in results),
        ttfa_ms_p50=sorted(r["ttfa_ms"] for r in results)[batch // 2],
        ttfa_ms_max=max(r["ttfa_ms"] for r in results),
        ms_per_step=round(max(r["ms_per_frame"] for r in results), 3),
    )


def spread_kv_blocks(runner, batch: int, live_len: int):
    """Give slots [0, batch) distinct KV blocks for `live_len` positions, interleaved
    as streams that grow together get them (a timing's rows; the engine's scheduler
    hands out real streams' blocks). -> the host block table before, for
    `restore_kv_blocks`."""
    from ttsfleet_runtime.engine.kv_blocks import blocks_for

    cache = runner.cache
    per_row = blocks_for(live_len, cache.block_size)
    if batch * per_row > cache.num_blocks - 1:
        raise ValueError(
            f"{batch} rows of {live_len} positions need {batch * per_row} KV blocks; "
            f"the pool has {cache.num_blocks - 1}"
        )
    saved = cache.host_table.clone()
    for slot in range(batch):
        cache.set_blocks(slot, [1 + j * batch + slot for j in range(per_row)])
    cache.flush()
    return saved


def restore_kv_blocks(runner, saved) -> None:
    cache = runner.cache
    for slot in range(saved.shape[0]):
        cache.set_blocks(slot, [b for b in saved[slot].tolist() if b])
    cache.flush()


def graph_step_ms(engine, batch: int, live_len: int, iters: int = 50) -> float:
    """Replay time of one captured decode step (GPU time, CUDA events)."""
    import torch

    runner = engine.runner
    B = runner.bucket(batch)
    graph = runner.graphs.get(B) or runner.capture(B)
    # Between runs every slot is free: give the rows a live length (and blocks
    # of their own to read) for the timing, and take them back after.
    saved = runner.state.position.clone()
    saved_blocks = spread_kv_blocks(runner, batch, live_len)
    runner.state.position[:batch] = live_len - 1
    runner.state.active.zero_()  # replays must not advance real streams
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    runner.state.position.copy_(saved)
    restore_kv_blocks(runner, saved_blocks)
    return round(start.elapsed_time(end) / iters, 3)


async def bench_size(size: str, args, budget: Budget) -> dict:
    log = budget.log
    import torch

    from ttsfleet_runtime.engine import process_switches
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    process_switches.set_for_serving(args.device)  # as the server times it
    r: dict = {}
    t = time.time()
    ckpt = ready_checkpoint(size, args)
    r["checkpoint_write_s"] = round(time.time() - t, 1)
    batches = [int(b) for b in args.batches.split(",")]
    t = time.time()
    engine = TTSEngine.from_pretrained(
        ckpt,
        args.device,
        max_batch=max(batches),
        max_queue=1024,
        cuda_graphs=not args.no_graphs,
        dtype=args.dtype,
        first_chunk_frames=args.first_chunk_frames,
        chunk_frames=args.chunk_frames,
        max_len=args.max_len,
        capture_all_graphs=False,
        progress=lambda m: log(f"  {size}: {m}"),
    )
    await engine.start()
    r["start_s"] = round(time.time() - t, 1)
    # Capture only the buckets this run uses, before anything is timed.
    t = time.time()
    runner = engine.runner
    if runner.use_graphs:
        with torch.inference_mode():
            for b in sorted({1, *batches}, reverse=True):
                if runner.bucket(b) not in runner.graphs:
                    runner.capture(runner.bucket(b))
        torch.cuda.synchronize()
    r["capture_s"] = round(time.time() - t, 1)
    log(f"{size}: captured {len(runner.graphs)} decode graphs in {r['capture_s']}s")
    r["config"] = dict(
        max_batch=max(batches),
        first_chunk_frames=args.first_chunk_frames,
        chunk_frames=args.chunk_frames,
        max_len=args.max_len,
        dtype=args.dtype,
        cuda_graphs=not args.no_graphs,
        frames=args.frames,
    )
    r["prompt_tokens"] = len(engine.builder.text_ids(TEXT))
    codec_state = engine.codec.state_bytes_per_stream  # a property of the codec
    r["memory_per_stream_bytes"] = dict(
        talker_kv_per_block=runner.cache.bytes_per_block,
        talker_kv_blocks=runner.cache.num_blocks - 1,
        predictor_kv=runner.predictor_cache.bytes_per_slot() if runner.predictor_cache else 0,
        codec_state=codec_state,
    )
    if torch.cuda.is_available():
        r["gpu_memory_allocated_gb"] = round(torch.cuda.memory_allocated() / 1e9, 2)
    log(f"{size}: started in {r['start_s']}s, memory {r['memory_per_stream_bytes']}")

    await asyncio.wait_for(run_one(engine, 8, seed=1), 120)  # warm-up
    singles = [
        await asyncio.wait_for(run_one(engine, args.frames, s, args.timestamps), 60)
        for s in range(args.repeats)
    ]
    r["single"] = singles
    log(f"{size}: batch 1: {singles[-1]}")
    ttfa = [await asyncio.wait_for(run_one(engine, 4, seed=100 + s), 30) for s in range(5)]
    r["ttfa_runs"] = ttfa
    log(f"{size}: ttfa {[x['ttfa_ms'] for x in ttfa]}")

    r["graph_step_ms"] = {}
    if runner.use_graphs:
        for b in batches:
            r["graph_step_ms"][f"B{b}"] = graph_step_ms(engine, b, r["prompt_tokens"] + 60)
        log(f"{size}: graph step ms {r['graph_step_ms']}")

    r["batch"] = []
    for b in batches:
        try:
            res = await asyncio.wait_for(run_batch(engine, b, args.frames, args.timestamps), 120)
        except Exception as e:
            res = dict(batch=b, error=repr(e), traceback=traceback.format_exc()[-2000:])
        r["batch"].append(res)
        log(f"{size}: batch {b}: {res}")
        if budget.left_s() < 0:
            log("time budget reached")
            break
    await engine.stop(drain_timeout_s=5)
    del engine
    torch.cuda.empty_cache()
    return r


def server_graphs(ckpt: str, args, log) -> dict:
    """The graphs `ttsfleet serve` captures at start with its default settings, and the
    seconds `ModelRunner.capture_all` takes: a fresh engine sized as the server sizes it
    (the benchmark's own engine is sized for this run), its capture timed alone. The
    compiled helpers are warm from the run before (same process); a server's first start
    also pays their compile."""
    import torch

    from ttsfleet_runtime.engine import process_switches
    from ttsfleet_runtime.engine.tts_engine import TTSEngine
    from ttsfleet_runtime.settings import ServerSettings

    process_switches.set_for_serving(args.device)

    server = {f.name: f.default for f in dataclasses.fields(ServerSettings)}
    say = lambda m: log(f"  server graphs: {m}")  # noqa: E731
    # What `serve.build_engine` passes; max_len and chunk_frames are TTSEngine's defaults.
    engine = TTSEngine.from_pretrained(
        ckpt,
        args.device,
        max_batch=server["max_batch"],
        max_queue=server["max_queue"],
        first_chunk_frames=server["first_chunk_frames"],
        cuda_graphs=server["cuda_graphs"] and not args.no_graphs,
        dtype=args.dtype,
        capture_all_graphs=False,
        progress=say,
    )
    runner = None
    try:
        t = time.time()
        engine.core.load()  # weights, KV cache, codec (and its graphs): no decode graphs
        load_s = time.time() - t
        runner = engine.runner
        capture_s = runner.capture_all(say)
        return dict(
            max_batch=runner.max_batch,
            max_len=runner.max_len,
            decode_graphs=len(runner.graphs),
            prefill_graphs=len(runner.prefill_graphs),
            graphs=len(runner.graphs) + len(runner.prefill_graphs),
            capture_s=round(capture_s, 2),
            load_s=round(load_s, 1),
        )
    finally:
        engine.core.stop()  # its codec worker thread holds the engine until stopped
        engine = runner = None  # the KV cache for 64 x 4608 positions: free it now
        gc.collect()
        torch.cuda.empty_cache()


def summarise(r: dict) -> dict:
    singles = r.get("single", [])
    batches = [b for b in r.get("batch", []) if "audio_s_per_s" in b]
    best = max(batches, key=lambda b: b["audio_s_per_s"]) if batches else {}
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    return dict(
        ms_per_frame_b1=med([s["ms_per_frame"] for s in singles]),
        ttfa_ms_b1=med([s["ttfa_ms"] for s in r.get("ttfa_runs", [])]),
        rtf_b1=med([s["rtf"] for s in singles]),
        audio_s_per_s_max=best.get("audio_s_per_s"),
        batch_at_max=best.get("batch"),
        worst_stream_rtf_at_max=best.get("worst_stream_rtf"),
        graph_step_ms_b1=r.get("graph_step_ms", {}).get("B1"),
        graph_step_ms_b128=r.get("graph_step_ms", {}).get("B128"),
        ttfa_from_admission_ms_b1=med(
            [s["ttfa_from_admission_ms"] for s in r.get("ttfa_runs", [])]
        ),
        graphs=r.get("server_graphs", {}).get("graphs"),
        capture_s=r.get("server_graphs", {}).get("capture_s"),
    )


class EngineRun:
    """One run of the benchmark: its options, clock and results (`ours.json`)."""

    def __init__(self, args: argparse.Namespace, argv: list[str]):
        self.args = args
        self.argv = argv
        self.budget = Budget(args.budget_s)
        self.results: dict = {}

    def dump(self) -> None:
        with open(os.path.join(self.args.out, "ours.json"), "w") as f:
            json.dump(self.results, f, indent=1, default=str)

    async def run(self, before) -> dict:
        """`before`: checks to run first, each `async check(out)` (the graph parity)."""
        import torch  # heavy: only when the benchmark runs (the CLI imports this module)

        args, results, log = self.args, self.results, self.budget.log
        results["env"] = machine_facts(args.device, CHECKOUT)
        results["command"] = " ".join(self.argv)
        for check in before:
            # Same process: compiled kernels are shared with the runs below.
            try:
                await asyncio.wait_for(check(args.out), 240)
            except Exception as e:
                log("check FAILED", repr(e), traceback.format_exc()[-1500:])
        for size in args.sizes.split(","):
            try:
                results[size] = await bench_size(size, args, self.budget)
                results[size]["summary"] = summarise(results[size])
            except Exception as e:
                results[size] = dict(error=repr(e), traceback=traceback.format_exc()[-4000:])
                log(f"{size} FAILED", traceback.format_exc())
                continue
            self.dump()
            if args.no_server_graphs or self.budget.left_s() < 0:
                continue
            # After bench_size: its engine (and the KV cache sized for this run) is gone.
            gc.collect()
            torch.cuda.empty_cache()
            try:
                results[size]["server_graphs"] = server_graphs(
                    checkpoint_path(size, args), args, log
                )
                log(f"{size}: server graphs {results[size]['server_graphs']}")
            except Exception as e:
                results[size]["server_graphs"] = dict(
                    error=repr(e), traceback=traceback.format_exc()[-2000:]
                )
                log(f"{size}: server graphs FAILED", traceback.format_exc())
            results[size]["summary"] = summarise(results[size])
            self.dump()
        results["wall_s"] = round(self.budget.elapsed_s(), 1)
        self.dump()
        return results


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", default=".", help="folder for ours.json")
    ap.add_argument("--sizes", default="0.6B,1.7B", help="random checkpoints to write and time")
    ap.add_argument(
        "--model", default=None, help="time this checkpoint instead (give one --sizes label)"
    )
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument(
        "--timestamps",
        action="store_true",
        help="every request asks for word timestamps (docs/timestamps.md: their cost)",
    )
    add_tokenizer_rate_argument(ap)
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--first-chunk-frames", type=int, default=1)
    ap.add_argument("--chunk-frames", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument(
        "--parity", action="store_true", help="first check graphed GPU == eager CPU codes"
    )
    ap.add_argument(
        "--no-server-graphs",
        action="store_true",
        help="skip timing the capture of the graphs the server takes at start",
    )


def run(args: argparse.Namespace) -> int:
    """Run the benchmark (after the graph parity check with --parity)."""
    before = []
    if args.parity:
        from .graph_parity import main as graph_parity

        before.append(graph_parity)
    os.makedirs(args.out, exist_ok=True)
    logging_setup()
    engine_run = EngineRun(args, sys.argv)
    asyncio.run(engine_run.run(before))
    engine_run.budget.log("done")
    return 0


def logging_setup() -> None:
    import logging

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
