"""Benchmark of the engine on a GPU (`ttsfleet-runtime bench`, the one entry point;
`ttsfleet bench` in a checkout is the same): random-weight checkpoints
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
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import gc
import json
import os
import pathlib
import platform
import statistics
import sys
import time
import traceback

T0 = time.time()
RESULTS: dict = {}
# The text every benchmark speaks; the peer harness (bench/peers/) imports it from here.
TEXT = (
    "The quick brown fox jumps over the lazy dog while the orchestra tunes up in the hall; "
    "meanwhile, a patient engineer measures every millisecond of latency, because streaming "
    "speech must start quickly and never stall."
)


def timed(fn, iters: int) -> list[float]:
    """Milliseconds per call: a CUDA-event pair per call on the GPU, a clock on the CPU."""
    import torch

    samples = []
    for _ in range(iters):
        if not torch.cuda.is_available():
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


class GraphTimer:
    """Per-call milliseconds of `calls` (a list of closures), one CUDA graph over all of
    them on the GPU, replayed after an L2 flush; plain calls on the CPU (smoke)."""

    def __init__(self, device, iters: int):
        import torch

        self.device, self.iters = device, iters
        self.cuda = device.type == "cuda"
        self.flush = torch.empty(256 << 20, dtype=torch.int8, device=device) if self.cuda else None

    def capture(self, calls):
        import torch

        for call in calls:  # compile (Triton, inductor) and warm up outside the capture
            call()
        if not self.cuda:
            return lambda: [call() for call in calls]
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for call in calls:
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
        torch.cuda.synchronize()
        return graph.replay

    def time(self, replay, calls: int) -> dict:
        import torch

        samples = []
        for _ in range(self.iters):
            if not self.cuda:
                t0 = time.perf_counter()
                replay()
                samples.append((time.perf_counter() - t0) * 1e3 / calls)
                continue
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / calls)
        ordered = sorted(samples)
        return {
            "median_ms": statistics.median(ordered),
            "p90_ms": ordered[int(0.9 * (len(ordered) - 1))],
            "min_ms": ordered[0],
            "samples_ms": [round(s, 5) for s in samples],
        }


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float32."""
    out, ref = out.float(), ref.float()
    return ((out - ref).norm() / ref.norm()).item()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def dump(out: str) -> None:
    with open(os.path.join(out, "ours.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def request(frames: int, seed: int, text: str = TEXT, cloned=None):
    """Exactly `frames` frames of `text`, spoken by the built-in speaker ryan, or with
    `cloned` (a `ClonedVoice`) by a Base model."""
    from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest

    return SynthesisRequest(
        text=text,
        voice="ryan" if cloned is None else None,
        cloned_voice=cloned,
        language="english",
        params=SamplingParams(seed=seed, max_frames=frames, min_frames=frames),
    )


async def run_one(engine, frames: int, seed: int, cloned=None) -> dict:
    t_submit = time.monotonic()
    stream = engine.submit(request(frames, seed, cloned=cloned))
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


async def run_batch(engine, batch: int, frames: int) -> dict:
    t0 = time.monotonic()
    results = await asyncio.gather(*(run_one(engine, frames, seed=1000 + i) for i in range(batch)))
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
    from .engine.kv_blocks import blocks_for

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


def run_sections(
    todo: list,
    into: dict,
    *,
    started: float,
    budget_s: float,
    dump,
    log,
    label: str = "",
    describe=lambda r: {k: v for k, v in r.items() if k != "samples_ms"},
) -> None:
    """The bench scripts' section loop: each (key, section) of `todo` runs in order into
    `into[key]`, and `dump()` writes the JSON after it. A section that raises records its
    error and the rest still run; one due past `budget_s` seconds after `started` is
    recorded as skipped. `log(label + key, describe(result))` reports each."""
    for key, run in todo:
        if time.time() - started > budget_s:
            into[key] = dict(skipped="time budget")
            continue
        try:
            into[key] = run()
            log(label + key, describe(into[key]))
        except Exception as e:
            into[key] = dict(error=repr(e), traceback=traceback.format_exc()[-3000:])
            log(label + key, "FAILED", traceback.format_exc())
        dump()


def report_start(args: argparse.Namespace, **versions: str) -> dict:
    """The head of an in-process GPU benchmark's JSON (bench/clone_voice.py, kv_paged.py):
    when and where it ran, Python, torch, CUDA and the GPU, `versions` of the packages it
    measures besides, its options, and an empty `sections` for `run_sections`."""
    import socket

    import torch

    return dict(
        started=datetime.datetime.now(datetime.UTC).isoformat(),
        host=socket.gethostname(),
        machine=platform.machine(),
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        **versions,
        # JSON-ready: paths as text.
        args={k: str(v) if isinstance(v, pathlib.PurePath) else v for k, v in vars(args).items()},
        sections={},
    )


def json_writer(path: str, results: dict):
    """A `dump()` for `run_sections`: writes `results`, as they stand, to `path`."""

    def dump() -> None:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)

    return dump


def checkpoint_path(size: str, args, variant: str = "CustomVoice") -> str:
    """Where the random checkpoint of `size`, `variant` and the tokenizer rate (the
    `--tokenizer-rate` of scripts that have one; else 12 Hz) lives, or `args.model`."""
    rate = getattr(args, "tokenizer_rate", 12)
    return args.model or os.path.join(args.ckpt_dir, f"Qwen3-TTS-{rate}Hz-{size}-{variant}-random")


def ready_checkpoint(size: str, args, variant: str = "CustomVoice") -> str:
    """`checkpoint_path(size, args, variant)`, first writing the random checkpoint of
    `size` and `variant` there (on `args.device`) when no `args.model` is given and none
    is there yet."""
    ckpt = checkpoint_path(size, args, variant)
    if not args.model and not os.path.exists(os.path.join(ckpt, "model.safetensors")):
        from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

        write_random_checkpoint(
            ckpt,
            size,
            variant,
            seed=0,
            device=args.device,
            tokenizer_rate_hz=getattr(args, "tokenizer_rate", 12),
            progress=lambda m: None,
        )
    return ckpt


async def bench_size(size: str, args) -> dict:
    import torch

    from ttsfleet_runtime.engine.tts_engine import TTSEngine

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
        await asyncio.wait_for(run_one(engine, args.frames, seed=s), 60)
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
            res = await asyncio.wait_for(run_batch(engine, b, args.frames), 120)
        except Exception as e:
            res = dict(batch=b, error=repr(e), traceback=traceback.format_exc()[-2000:])
        r["batch"].append(res)
        log(f"{size}: batch {b}: {res}")
        if time.time() - T0 > args.budget_s:
            log("time budget reached")
            break
    await engine.stop(drain_timeout_s=5)
    del engine
    torch.cuda.empty_cache()
    return r


def server_graphs(ckpt: str, args) -> dict:
    """The graphs `ttsfleet serve` captures at start with its default settings, and the
    seconds `ModelRunner.capture_all` takes: a fresh engine sized as the server sizes it
    (the benchmark's own engine is sized for this run), its capture timed alone. The
    compiled helpers are warm from the run before (same process); a server's first start
    also pays their compile."""
    import torch

    from .engine.tts_engine import TTSEngine
    from .settings import ServerSettings

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


async def main_async(args) -> None:
    import torch  # heavy: only when the benchmark runs (the CLI imports this module)

    RESULTS["env"] = dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        python=platform.python_version(),
        date=datetime.date.today().isoformat(),
    )
    RESULTS["command"] = " ".join(sys.argv)
    for check in args.before:
        # Same process: compiled kernels are shared with the runs below.
        try:
            await asyncio.wait_for(check(args.out), 240)
        except Exception as e:
            log("check FAILED", repr(e), traceback.format_exc()[-1500:])
    for size in args.sizes.split(","):
        try:
            RESULTS[size] = await bench_size(size, args)
            RESULTS[size]["summary"] = summarise(RESULTS[size])
        except Exception as e:
            RESULTS[size] = dict(error=repr(e), traceback=traceback.format_exc()[-4000:])
            log(f"{size} FAILED", traceback.format_exc())
            continue
        dump(args.out)
        if args.no_server_graphs or time.time() - T0 > args.budget_s:
            continue
        # After bench_size: its engine (and the KV cache sized for this run) is gone.
        gc.collect()
        torch.cuda.empty_cache()
        try:
            RESULTS[size]["server_graphs"] = server_graphs(checkpoint_path(size, args), args)
            log(f"{size}: server graphs {RESULTS[size]['server_graphs']}")
        except Exception as e:
            RESULTS[size]["server_graphs"] = dict(
                error=repr(e), traceback=traceback.format_exc()[-2000:]
            )
            log(f"{size}: server graphs FAILED", traceback.format_exc())
        RESULTS[size]["summary"] = summarise(RESULTS[size])
        dump(args.out)
    RESULTS["wall_s"] = round(time.time() - T0, 1)
    dump(args.out)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", default=".", help="folder for ours.json")
    ap.add_argument("--sizes", default="0.6B,1.7B", help="random checkpoints to write and time")
    ap.add_argument(
        "--model", default=None, help="time this checkpoint instead (give one --sizes label)"
    )
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument(
        "--tokenizer-rate",
        type=int,
        choices=(12, 25),
        default=12,
        help="random checkpoints of this speech tokenizer rate (Hz)",
    )
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
    args.before = []
    if args.parity:
        from .graph_parity import main as graph_parity

        args.before.append(graph_parity)
    os.makedirs(args.out, exist_ok=True)
    logging_setup()
    asyncio.run(main_async(args))
    log("done")
    return 0


def logging_setup() -> None:
    import logging

    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
