"""Where the GPU time of one engine step goes: kernels per step, GPU time per step,
the top kernels, and the captured CUDA graph's replay time.

Two steps, on a random checkpoint at real dimensions:

- decode: `ModelRunner.step` (talker + 15 predictor passes + sampling, on the
  engine's own operations) over slots [0, B), every row occupied up to
  `--kv-len` positions, over the KV view a graph uses (`runner.max_len`);
- codec: `StreamingCodec.decode` for B streams of n frames (eager: before its graph is
  captured; the index upload and state gather/scatter included).

Each step runs eagerly under `torch.profiler` for `--iters` steps after warm-up
(numbers are per step), then its CUDA graph replays `--replays` times, each timed
with CUDA events (median). Decode graphs come from `runner.capture(B)`; rows stay
inactive (`state.active` False), so replays advance nothing. JSON goes to
`--out/profile_step.json` after every section; a failing section records its error
and the rest still run. A short table is printed last.

On the GPU machine, from the repository root:
    PYTHONPATH=runtime python3 bench/profile_step.py --out $OUT --sizes 1.7B,0.6B
With fp8 weights (docs/fp8-weights.md), the same with `--weights fp8`.
On the CPU (tiny model; CPU ops instead of kernels; no graphs), as the tests run it:
    PYTHONPATH=runtime python3 bench/profile_step.py --device cpu --sizes tiny --out /tmp/p
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

from ttsfleet_runtime.bench.common import Budget, machine_facts, run_sections, timed

REPO = Path(__file__).resolve().parents[1]
NAME_CHARS = 120
TOP = 25


# ---------------------------------------------------------------- measuring
def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def profile_step(step: Callable[[], object], device: str, iters: int, warmup: int) -> dict:
    """Run `step` eagerly `warmup` times, then `iters` times under the profiler.
    CUDA: every GPU activity (kernels, memsets, copies) counts as a kernel. CPU: the
    leaf operators stand in for kernels (the tests exercise the same bookkeeping)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        step()
    sync(device)
    t = time.perf_counter()
    for _ in range(iters):
        step()
    sync(device)
    eager_wall_ms = (time.perf_counter() - t) * 1000 / iters
    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(iters):
            step()
        sync(device)
    if device == "cuda":
        # GPU-side ranges of record_function (compiled regions) span kernels: not kernels.
        events = [
            e
            for e in prof.events()
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
        ]
    else:
        events = [
            e
            for e in prof.events()
            if e.device_type == DeviceType.CPU and not e.cpu_children and not e.is_async
        ]
    return aggregate([(e.name, e.time_range.elapsed_us()) for e in events], iters) | dict(
        activity="gpu kernels" if device == "cuda" else "cpu leaf ops",
        iters=iters,
        eager_wall_ms=round(eager_wall_ms, 3),
    )


def aggregate(events: list[tuple[str, float]], iters: int) -> dict:
    """(name, microseconds) of `iters` steps -> per-step count, time, top names by time."""
    calls: dict[str, int] = defaultdict(int)
    us: dict[str, float] = defaultdict(float)
    for name, t in events:
        calls[name] += 1
        us[name] += t
    top = sorted(us, key=us.get, reverse=True)[:TOP]
    return dict(
        kernels_per_step=round(len(events) / iters, 1),
        gpu_us_per_step=round(sum(us.values()) / iters, 1),
        distinct=len(us),
        top=[
            dict(
                name=name[:NAME_CHARS],
                calls_per_step=round(calls[name] / iters, 2),
                us_per_step=round(us[name] / iters, 1),
            )
            for name in top
        ],
    )


def replay_ms(replay: Callable[[], None], replays: int) -> dict:
    """Each `replay` (of a CUDA graph) timed alone with CUDA events, back to back; median
    and spread."""
    for _ in range(5):
        replay()
    torch.cuda.synchronize()
    marks = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(replays)
    ]
    for start, end in marks:
        start.record()
        replay()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in marks)
    return dict(
        graph_ms=round(statistics.median(times), 4),
        graph_ms_min=round(times[0], 4),
        graph_ms_p90=round(times[int(0.9 * (len(times) - 1))], 4),
        replays=replays,
    )


# ---------------------------------------------------------------- the two steps
def decode_section(runner, B: int, args) -> dict:
    """The decode step of batch bucket B, every row occupied up to args.kv_len."""
    from ttsfleet_runtime.engine.api import SamplingParams
    from ttsfleet_runtime.engine.prefill_rows import SlotParams

    B = runner.bucket(B)
    if args.kv_len >= runner.max_len:
        raise ValueError(f"--kv-len {args.kv_len} must be below --max-len {runner.max_len}")
    # The API's default sampling (temperature 0.9, top-k 50, ...), a seed per row.
    slot_fields = {f.name for f in dataclasses.fields(SlotParams)}
    defaults = {k: v for k, v in dataclasses.asdict(SamplingParams()).items() if k in slot_fields}
    for slot in range(B):
        runner.set_sampling(slot, SlotParams(**(defaults | dict(seed=slot, min_frames=0))))
    from ttsfleet_runtime.bench.engine import spread_kv_blocks

    spread_kv_blocks(runner, B, args.kv_len + 1)  # each row reads blocks of its own
    s = runner.state
    s.position[:B] = args.kv_len
    s.hidden[:B].normal_()
    s.code0[:B] = torch.randint(0, 2048, (B,), device=s.code0.device)
    s.active.zero_()  # nothing advances: every step and replay sees the same state
    r = dict(batch=B, kv_len=args.kv_len, kv_view=runner.max_len)
    r |= profile_step(lambda: runner.step(B, runner.max_len), args.device, args.iters, 3)
    if runner.use_graphs:
        graph = runner.graphs.get(B) or runner.capture(B)
        r |= replay_ms(graph.replay, args.replays)
    return r


def codec_section(codec, B: int, n: int, args) -> dict:
    """The 12 Hz codec step (`StreamingCodec`) for B streams of n frames each."""
    slots = [codec.open() for _ in range(B)]
    try:
        codes = torch.randint(
            0,
            codec.decoder.config.codebook_size,
            (B, n, codec.num_quantizers),
            device=codec.device,
        )
        r = dict(batch=B, frames=n)
        if codec.has_graph(B, n):
            raise ValueError(f"the codec already has a graph of {B} x {n}: it would not be eager")
        r |= profile_step(lambda: codec.decode(slots, codes), args.device, args.iters, 2)
        if args.device == "cuda":
            codec.capture([B], [n])
            codec.decode(slots, codes)  # this call's inputs in the graph's buffers
            r |= replay_ms(lambda: codec.replay_graph(B, n), max(10, args.replays // 5))
        return r
    finally:
        for slot in slots:
            codec.close(slot)


def codec25_section(codec, B: int, n: int, args) -> dict:
    """The 25 Hz decoder as the codec worker calls it (`Codec25Hz.decode`; on a GPU with
    the DiT's windows and the steady vocoder window as the CUDA graphs a server captures)
    for B streams in steady state: each past its first block, every call `n` more codes
    a stream (12: one DiT block each, what a running stream needs every 0.48 s of audio).
    Then each stage alone at the call's shapes: the DiT windows (eager and graphed, and
    graphed with torch's elementwise operations instead of kernels/dit_ops.py) and the
    vocoder's windows (eager and graphed); at the smallest batch, the DiT's accuracy with
    and without the kernels against a float32 copy."""
    decoder = codec.decoder  # the StreamingDecoder25Hz
    config = decoder.decoder.config.mel_generator
    device, dtype = decoder.device, decoder.noise.dtype
    if args.device == "cuda" and not codec.has_graph(B, n):
        codec.capture([B], [n])
    slots = [decoder.open(None) for _ in range(B)]
    try:
        first = torch.randint(0, config.num_embeds - 1, (B, 2 * decoder.block_codes, 1))
        codec.decode(slots, first)  # the first blocks: every stream has history
        step_codes = torch.randint(0, config.num_embeds - 1, (B, n, 1))
        seconds = B * n / decoder.frame_rate  # audio a call makes, past the first block
        r = dict(batch=B, codes_per_stream=n, audio_s_per_call=round(seconds, 3))
        r["dit_graphed"] = codec.has_graph(B, n)
        on_gpu = args.device == "cuda"
        r |= profile_step(
            lambda: codec.decode(slots, step_codes), args.device, args.iters, 2 if on_gpu else 1
        )
        r["audio_s_per_s"] = round(seconds / (r["eager_wall_ms"] / 1000), 3)
        width = decoder.window_frames
        dit_inputs = (
            torch.randint(0, config.num_embeds - 1, (B, width // decoder.repeats), device=device),
            torch.randn(B, width, config.mel_dim, device=device, dtype=dtype),
            torch.zeros(B, config.enc_dim, device=device, dtype=dtype),
            torch.zeros(B, config.enc_emb_dim, device=device, dtype=dtype),
            torch.ones(B, width, dtype=torch.bool, device=device),
        )
        frames = decoder.vocoder_left + decoder.block_frames + decoder.vocoder_right
        mel = torch.randn(B, frames, config.mel_dim, device=device, dtype=dtype)

        def dit():
            return decoder.decoder.dit.sample(*dit_inputs)

        def vocoder():
            return decoder.decoder.bigvgan(mel)

        iters = max(3, args.iters) if on_gpu else args.iters  # a CPU call takes seconds
        r["dit_windows_eager_ms"] = round(statistics.median(timed(dit, iters)), 3)
        r["vocoder_eager_ms"] = round(statistics.median(timed(vocoder, iters)), 3)
        r["window_frames"], r["vocoder_frames"] = width, frames
        if on_gpu:
            r["dit_windows_graph"] = graphed_ms(dit, args.replays // 10)
            dit_model = decoder.decoder.dit
            if dit_model.fused_kernels:
                with fused_kernels(dit_model, False):
                    r["dit_windows_torch_ops_graph"] = graphed_ms(dit, args.replays // 10)
                if B == 1:
                    r["dit_accuracy"] = dit_accuracy(dit_model, dit_inputs)
            try:
                r["vocoder_graph"] = graphed_ms(vocoder, args.replays // 10)
            except Exception as e:  # what stands in the way of a graph is worth knowing
                r["vocoder_graph"] = dict(error=repr(e)[:300])
        return r
    finally:
        for slot in slots:
            decoder.close(slot)


def dit_accuracy(dit, inputs) -> dict:
    """SNR (dB) of the DiT's mel in its dtype, with torch's elementwise operations and
    with kernels/dit_ops.py, against a float32 copy on the same inputs."""
    import copy

    reference = copy.deepcopy(dit).float()
    reference.fused_kernels = False
    exact = reference.sample(*(x.float() if x.is_floating_point() else x for x in inputs))
    del reference

    def snr(mel: torch.Tensor) -> float:
        error = (mel.float() - exact).pow(2).mean()
        return round(10 * math.log10(exact.pow(2).mean().item() / max(error.item(), 1e-30)), 2)

    out = {}
    for name, fused in (("torch_ops_snr_db", False), ("fused_snr_db", True)):
        with fused_kernels(dit, fused):
            out[name] = snr(dit.sample(*inputs))
    return out


@contextlib.contextmanager
def fused_kernels(dit, on: bool):
    """The DiT with kernels/dit_ops.py on or off for the block, as it was after."""
    was, dit.fused_kernels = dit.fused_kernels, on
    try:
        yield
    finally:
        dit.fused_kernels = was


def graphed_ms(fn: Callable[[], object], replays: int) -> dict:
    """`fn` captured as a CUDA graph, its replays timed (`replay_ms`)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return replay_ms(graph.replay, max(10, replays))


# ---------------------------------------------------------------- driver
def build_engine(size: str, args, decode_batches: list[int], codec_steps: list[tuple]):
    from ttsfleet_runtime.bench.common import ready_checkpoint
    from ttsfleet_runtime.engine import process_switches
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    process_switches.set_for_serving(args.device)
    ckpt = ready_checkpoint(size, args)  # the same folder `ttsfleet-runtime bench` writes
    engine = TTSEngine.from_pretrained(
        ckpt,
        args.device,
        max_batch=max(decode_batches + [b for b, _ in codec_steps]),
        max_len=args.max_len,
        cuda_graphs=args.device == "cuda",
        dtype=args.dtype,
        weights=args.weights,
        capture_all_graphs=False,
        progress=lambda m: args.budget.log(f"  {size}: {m}"),
    )
    engine.core.load()  # weights, KV cache, codec: the engine thread is never started
    return engine


def profile_size(size: str, args, results: dict, dump: Callable[[], None]) -> None:
    decode_batches = [int(b) for b in args.batches.split(",") if b]
    codec_steps = [tuple(int(x) for x in c.split("x")) for c in args.codec.split(",") if c]
    r = results["sizes"][size] = {}
    t = time.time()
    try:
        engine = build_engine(size, args, decode_batches, codec_steps)
    except Exception as e:
        r["error"] = repr(e)
        r["traceback"] = traceback.format_exc()[-3000:]
        args.budget.log(f"{size}: engine FAILED", traceback.format_exc())
        return
    r["load_s"] = round(time.time() - t, 1)
    r["config"] = dict(max_batch=engine.runner.max_batch, max_len=engine.runner.max_len)
    # What a step reads: the decoder layers' matrices are the bulk (half in fp8).
    r["weight_bytes"] = engine.model.weight_bytes()
    dump()
    sections = [
        (f"decode_B{b}", lambda b=b: decode_section(engine.runner, b, args)) for b in decode_batches
    ]
    if args.tokenizer_rate == 25:
        sections += [
            (f"codec25_B{b}_n{n}", lambda b=b, n=n: codec25_section(engine.codec, b, n, args))
            for b, n in codec_steps
        ]
    else:
        sections += [
            (f"codec_B{b}_n{n}", lambda b=b, n=n: codec_section(engine.codec.codec, b, n, args))
            for b, n in codec_steps
        ]
    with torch.inference_mode():
        run_sections(
            sections,
            r,
            budget=args.budget,
            dump=dump,
            label=f"{size} ",
            describe=row,
        )
    b1 = r.get("decode_B1", {})
    r["summary"] = dict(
        kernels_per_step_b1=b1.get("kernels_per_step"),
        gpu_ms_per_step_b1=ms(b1.get("gpu_us_per_step")),
        graph_ms_b1=b1.get("graph_ms"),
        graph_ms_b128=r.get("decode_B128", {}).get("graph_ms"),
    )
    engine = None
    gc.collect()
    if args.device == "cuda":
        torch.cuda.empty_cache()


def ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def row(section: dict) -> str:
    if "kernels_per_step" not in section:
        return section.get("error") or section.get("skipped") or "?"
    graph = section.get("graph_ms")
    line = (
        f"{section['kernels_per_step']:>8.0f} {ms(section['gpu_us_per_step']):>9.3f} "
        f"{section['distinct']:>8} {'-' if graph is None else f'{graph:.3f}':>9}"
    )
    if "dit_windows_eager_ms" in section:  # a 25 Hz decoder call and its stages
        line += (
            f"  call {section['eager_wall_ms']:.1f} ms = {section['audio_s_per_s']} audio-s/s;"
            f" alone: DiT {section['dit_windows_eager_ms']:.1f} ms"
            f" (graph {section.get('dit_windows_graph', {}).get('graph_ms', '-')}),"
            f" vocoder {section['vocoder_eager_ms']:.1f} ms"
            f" (graph {section.get('vocoder_graph', {}).get('graph_ms', '-')})"
        )
    return line


def table(results: dict) -> str:
    lines = [
        f"{'size':<6} {'step':<16} {'kernels':>8} {'GPU ms':>9} {'distinct':>8} {'graph ms':>9}"
    ]
    for size, r in results["sizes"].items():
        for key, section in r.items():
            if key.startswith(("decode_", "codec_")):
                lines.append(f"{size:<6} {key:<16} {row(section)}")
        if "error" in r:
            lines.append(f"{size:<6} {'(engine)':<16} {r['error'][:80]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="folder for profile_step.json")
    ap.add_argument("--sizes", default="1.7B", help="random checkpoints: 1.7B, 0.6B, tiny")
    ap.add_argument("--model", default=None, help="profile this checkpoint (one --sizes label)")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument(
        "--weights",
        default="bf16",
        choices=["bf16", "fp8"],
        help="the decoder layers' weights (the server's --weights; docs/fp8-weights.md)",
    )
    ap.add_argument("--batches", default="1,32,128", help="decode batch sizes")
    ap.add_argument(
        "--tokenizer-rate",
        type=int,
        choices=(12, 25),
        default=12,
        help="random checkpoints of this speech tokenizer rate (Hz); 25: the codec steps "
        "profile the 25 Hz decoder in steady state (BxCODES a stream a call; 12 = a block)",
    )
    ap.add_argument("--codec", default=None, help="codec steps, BxFRAMES (default by rate)")
    ap.add_argument("--kv-len", type=int, default=256, help="occupied KV positions per row")
    ap.add_argument("--max-len", type=int, default=512, help="KV positions per slot")
    ap.add_argument("--iters", type=int, default=5, help="profiled steps")
    ap.add_argument("--replays", type=int, default=200, help="timed graph replays")
    ap.add_argument("--budget-s", type=float, default=500, help="skip sections after this")
    args = ap.parse_args(argv)
    args.budget = Budget(args.budget_s)
    if args.codec is None:
        args.codec = (
            "1x12,8x12,32x12,64x12,128x12" if args.tokenizer_rate == 25 else "1x1,1x8,32x8,128x8"
        )
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device: use --device cpu")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "profile_step.json")
    results: dict = dict(
        env=machine_facts(args.device, REPO),
        config={k: v for k, v in vars(args).items() if k not in ("out", "budget")},
        sizes={},
    )

    def dump() -> None:
        results["wall_s"] = round(args.budget.elapsed_s(), 1)
        with open(path, "w") as f:
            json.dump(results, f, indent=1, default=str)

    dump()
    for size in args.sizes.split(","):
        profile_size(size, args, results, dump)
        dump()
    args.budget.log(f"wrote {path}")
    print(table(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
