#!/usr/bin/env python3
"""GPU benchmark: a burst of simultaneous requests, prefilled in packed calls,
into an engine already running 0 or 64 streams.

Random 1.7B CustomVoice checkpoint at real size (written unless present, as
`ttsfleet-runtime bench` does), bf16, CUDA graphs captured before anything is
timed. Sections, each guarded (a failure is recorded, the rest goes on):

- capture: seconds to capture the decode graphs (every batch bucket up to
  --max-batch) and each packed prefill graph (per bucket);
- prefill_ms: one packed prefill call per bucket (as many copies of a real
  prompt as fill it, at most PREFILL_PROMPTS), CUDA events, median of 20;
- parity: a burst of 8 (different voices and languages) packed vs one prompt
  per call: the share of identical frames (bf16: rounding may differ; the CPU
  tests check exact equality in float32);
- bursts: for each running count and burst size, the burst's time to first
  audio (submit -> first chunk, p50/p95/max), the running streams' minimum
  lead over playback during the burst as their client hears it (audio
  received before a chunk - time since the first chunk, at each arrival; < 0
  is an underrun) and as the engine measures it, and the engine's underrun
  and deferred-prefill counters; one burst also with one prompt per call.

Writes --out/prefill_burst.json after every section; a table last.

    PYTHONPATH=runtime python3 bench/prefill_burst.py --out $OUT --budget-s 170
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import sys
import time
import traceback

import torch

from ttsfleet_runtime.benchmark import TEXT, ready_checkpoint, request, timed
from ttsfleet_runtime.engine import scheduler as scheduler_module
from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest
from ttsfleet_runtime.engine.model_runner import PREFILL_PROMPTS, Prompt, SlotParams
from ttsfleet_runtime.engine.tts_engine import TTSEngine

T0 = time.time()
RESULTS: dict = {}


def log(*a) -> None:
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def dump(out: str) -> None:
    with open(os.path.join(out, "prefill_burst.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def over_budget(args) -> bool:
    return time.time() - T0 > args.budget_s


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    ordered = sorted(xs)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---------------------------------------------------------------- sections
def capture(engine) -> dict:
    runner = engine.runner
    if not runner.use_graphs:
        return dict(skipped="no CUDA graphs")
    out: dict = {}
    with torch.inference_mode():
        t = time.time()
        for B in reversed(runner.batch_buckets):
            runner.capture(B)
        sync()
        out["decode_graphs"] = len(runner.batch_buckets)
        out["decode_s"] = round(time.time() - t, 2)
        out["prefill_s_by_bucket"] = {}
        for P in reversed(runner.prefill_buckets):
            t = time.time()
            runner._capture_prefill(P)
            sync()
            out["prefill_s_by_bucket"][P] = round(time.time() - t, 3)
    out["prefill_s"] = round(sum(out["prefill_s_by_bucket"].values()), 2)
    return out


def prefill_ms(engine, iters: int = 20) -> dict:
    """One packed call per bucket, while the engine is idle (every slot free)."""
    runner, builder = engine.runner, engine.builder
    voice = builder.voice("ryan", None, "english")
    embeds = builder.prefill_embeds(engine.model, voice, builder.text_ids(TEXT)[:1])
    T = embeds.shape[0]
    params = SlotParams(0.9, 50, 1.0, 1.05, 0.9, 50, 1.0, 7, 0)
    out = dict(prompt_positions=T, by_bucket={})
    cases = [(1, "single")] + [
        (min(PREFILL_PROMPTS, runner.max_batch, max(1, P // T)), P) for P in runner.prefill_buckets
    ]
    from ttsfleet_runtime.engine.kv_blocks import blocks_for

    per_prompt = blocks_for(T, runner.cache.block_size)
    for k, label in cases:
        prompts = [Prompt(slot, embeds, params) for slot in range(k)]
        for slot in range(k):  # blocks of their own, as the scheduler would give
            runner.set_blocks(slot, [1 + slot * per_prompt + j for j in range(per_prompt)])
        for _ in range(3):
            runner.prefill(prompts)
        samples = timed(lambda prompts=prompts: runner.prefill(prompts), iters)
        for slot in range(k):
            runner.release(slot)
        out["by_bucket"][str(label)] = dict(
            prompts=k,
            positions=k * T,
            median_ms=round(statistics.median(samples), 3),
            min_ms=round(min(samples), 3),
            samples_ms=[round(s, 3) for s in samples],
        )
        log(f"prefill {label}: {k} prompts, {statistics.median(samples):.2f} ms")
    sync()
    return out


async def consume(stream, record: dict) -> None:
    async for chunk in stream:
        record["arrivals"].append((time.monotonic(), chunk.frames))


def submit_all(engine, requests) -> list:
    """Submit together: the engine thread plans once all have arrived."""
    with engine.core.lock:
        return [engine.submit(r) for r in requests]


async def parity(engine) -> dict:
    voices = [("ryan", "english"), ("vivian", "auto"), ("ryan", "chinese"), ("vivian", "english")]
    requests = [
        SynthesisRequest(
            text=TEXT,
            voice=voices[i % 4][0],
            language=voices[i % 4][1],
            params=SamplingParams(seed=500 + i, max_frames=16, min_frames=16),
        )
        for i in range(8)
    ]

    async def run() -> list:
        streams = submit_all(engine, requests)
        await asyncio.gather(*(consume(s, dict(arrivals=[])) for s in streams))
        return [s.seq.all_codes for s in streams]

    packed = await run()
    engine.scheduler.max_prefill_prompts = 1
    try:
        alone = await run()
    finally:
        engine.scheduler.max_prefill_prompts = PREFILL_PROMPTS
    frames = same = first = 0
    for a, b in zip(packed, alone, strict=True):
        first += bool((a[0] == b[0]).all())
        for fa, fb in zip(a, b, strict=False):
            frames += 1
            same += bool((fa == fb).all())
    return dict(
        requests=len(requests),
        first_frame_equal=f"{first}/{len(requests)}",
        frames_equal_share=round(same / max(1, frames), 3),
    )


async def scenario(engine, running: int, burst: int, args, one_per_call: bool = False) -> dict:
    core = engine.core
    background = [dict(arrivals=[]) for _ in range(running)]
    bg_streams = submit_all(
        engine, [request(args.background_frames, seed=9000 + i) for i in range(running)]
    )
    bg_tasks = [
        asyncio.ensure_future(consume(s, r)) for s, r in zip(bg_streams, background, strict=True)
    ]
    deadline = time.monotonic() + 30
    while running and any(not r["arrivals"] for r in background):
        if time.monotonic() > deadline:
            raise TimeoutError("the running streams did not start within 30 s")
        await asyncio.sleep(0.01)
    if running:
        await asyncio.sleep(args.settle_s)  # steady state before the burst
    before = engine.stats()
    engine_leads: list[float] = []

    async def poll() -> None:
        while True:
            lead = engine.stats().min_lead_s
            if lead is not None:
                engine_leads.append(lead)
            await asyncio.sleep(0.005)

    poller = asyncio.ensure_future(poll())
    if one_per_call:
        engine.scheduler.max_prefill_prompts = 1
    try:
        records = [dict(arrivals=[]) for _ in range(burst)]
        t_submit = time.monotonic()
        streams = submit_all(engine, [request(args.frames, seed=100 + i) for i in range(burst)])
        await asyncio.wait_for(
            asyncio.gather(*(consume(s, r) for s, r in zip(streams, records, strict=True))), 120
        )
        t_done = time.monotonic()
    finally:
        engine.scheduler.max_prefill_prompts = PREFILL_PROMPTS
        poller.cancel()
    after = engine.stats()
    for s in bg_streams:
        s.cancel()
    await asyncio.gather(*bg_tasks, return_exceptions=True)
    while core.busy:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # an idle iteration forgets the last lead (the next poll's)
    ttfa = [(r["arrivals"][0][0] - t_submit) * 1e3 for r in records if r["arrivals"]]
    # The running streams' lead at each chunk arrival inside the burst window.
    client_leads = []
    for r in background:
        arrivals = r["arrivals"]
        t0, heard = arrivals[0][0], 0
        for t, frames in arrivals:
            if t_submit <= t <= t_done:
                client_leads.append(heard / engine.info.frame_rate_hz - (t - t0))
            heard += frames
    return dict(
        running=running,
        burst=burst,
        one_prompt_per_call=one_per_call,
        ttfa_ms_p50=percentile(ttfa, 0.5),
        ttfa_ms_p95=percentile(ttfa, 0.95),
        ttfa_ms_max=round(max(ttfa), 2) if ttfa else None,
        burst_wall_s=round(t_done - t_submit, 3),
        completed=sum(bool(r["arrivals"]) for r in records),
        running_min_lead_s=round(min(client_leads), 3) if client_leads else None,
        running_underrun_chunks=sum(lead < 0 for lead in client_leads),
        engine_min_lead_s=round(min(engine_leads), 3) if engine_leads else None,
        engine_underrun_steps=after.underrun_steps_total - before.underrun_steps_total,
        prefill_deferred=after.prefill_deferred_total - before.prefill_deferred_total,
        ttfa_ms=[round(x, 2) for x in ttfa],
    )


# ---------------------------------------------------------------- main
async def main_async(args) -> None:
    RESULTS["env"] = dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        python=platform.python_version(),
        machine=platform.machine(),
        date=datetime.date.today().isoformat(),
        command=" ".join(sys.argv),
    )
    try:
        import triton

        RESULTS["env"]["triton"] = triton.__version__
    except ImportError:
        pass
    RESULTS["config"] = dict(
        size=args.size,
        max_batch=args.max_batch,
        max_len=args.max_len,
        frames=args.frames,
        background_frames=args.background_frames,
        prefill_prompts=PREFILL_PROMPTS,
        lead_guard_s=scheduler_module.LEAD_GUARD_S,
        guarded_prefill_tokens=scheduler_module.GUARDED_PREFILL_TOKENS,
    )
    t = time.time()
    ckpt = ready_checkpoint(args.size, args)
    RESULTS["checkpoint_write_s"] = round(time.time() - t, 1)
    t = time.time()
    engine = TTSEngine.from_pretrained(
        ckpt,
        args.device,
        max_batch=args.max_batch,
        max_queue=1024,
        cuda_graphs=args.device.startswith("cuda"),
        dtype=args.dtype,
        max_len=args.max_len,
        capture_all_graphs=False,
        progress=lambda m: log(f"  {m}"),
    )
    await engine.start()
    RESULTS["start_s"] = round(time.time() - t, 1)
    dump(args.out)

    sections = [
        ("capture", lambda: capture(engine)),
        ("prefill_ms", lambda: prefill_ms(engine)),
    ]
    for name, fn in sections:
        try:
            RESULTS[name] = fn()
        except Exception as e:
            RESULTS[name] = dict(error=repr(e), traceback=traceback.format_exc()[-3000:])
            log(f"{name} FAILED", traceback.format_exc())
        log(f"{name}: { {k: v for k, v in RESULTS[name].items() if k != 'by_bucket'} }")
        dump(args.out)
    try:
        await asyncio.wait_for(consume(engine.submit(request(8, seed=1)), dict(arrivals=[])), 60)
        RESULTS["parity"] = await asyncio.wait_for(parity(engine), 60)
    except Exception as e:
        RESULTS["parity"] = dict(error=repr(e), traceback=traceback.format_exc()[-3000:])
    log(f"parity: {RESULTS['parity']}")
    dump(args.out)

    RESULTS["bursts"] = []
    plan = [
        (running, burst, False)
        for running in (int(x) for x in args.running.split(","))
        for burst in (int(x) for x in args.bursts.split(","))
    ]
    plan.append((0, args.one_per_call_burst, True))
    for running, burst, one_per_call in plan:
        if running + burst > args.max_batch:
            continue
        if over_budget(args):
            RESULTS["bursts"].append(dict(running=running, burst=burst, skipped="time budget"))
            continue
        try:
            row = await scenario(engine, running, burst, args, one_per_call)
        except Exception as e:
            row = dict(
                running=running,
                burst=burst,
                error=repr(e),
                traceback=traceback.format_exc()[-2000:],
            )
        RESULTS["bursts"].append(row)
        log({k: v for k, v in row.items() if k not in ("ttfa_ms", "traceback")})
        dump(args.out)
    await engine.stop(drain_timeout_s=5)
    RESULTS["wall_s"] = round(time.time() - T0, 1)
    dump(args.out)
    table()


def table() -> None:
    cap = RESULTS.get("capture", {})
    print(f"\ncapture: decode {cap.get('decode_s')} s, prefill {cap.get('prefill_s')} s")
    print(f"{'prefill call':>14} {'prompts':>8} {'positions':>10} {'median ms':>10}")
    for label, r in RESULTS.get("prefill_ms", {}).get("by_bucket", {}).items():
        print(f"{label:>14} {r['prompts']:>8} {r['positions']:>10} {r['median_ms']:>10}")
    print(f"parity (bf16, packed vs one per call): {RESULTS.get('parity')}")
    head = (
        f"{'running':>7} {'burst':>5} {'mode':>8} {'TTFA p50':>9} {'p95':>7} {'max':>7} "
        f"{'min lead s':>10} {'underruns':>9} {'eng lead':>8} {'deferred':>8}"
    )
    print(head)
    for r in RESULTS.get("bursts", []):
        if "ttfa_ms_p50" not in r:
            print(f"{r['running']:>7} {r['burst']:>5} {r.get('skipped') or r.get('error')}")
            continue
        mode = "1/call" if r["one_prompt_per_call"] else "packed"
        print(
            f"{r['running']:>7} {r['burst']:>5} {mode:>8} {r['ttfa_ms_p50']:>9} "
            f"{r['ttfa_ms_p95']:>7} {r['ttfa_ms_max']:>7} {str(r['running_min_lead_s']):>10} "
            f"{r['running_underrun_chunks']:>9} {str(r['engine_min_lead_s']):>8} "
            f"{r['prefill_deferred']:>8}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--budget-s", type=float, default=170)
    ap.add_argument("--size", default="1.7B")
    ap.add_argument("--model", default=None, help="a checkpoint folder instead of a random one")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--max-batch", type=int, default=192)
    ap.add_argument("--max-len", type=int, default=1280)
    ap.add_argument("--frames", type=int, default=48, help="frames per burst request")
    ap.add_argument("--background-frames", type=int, default=400)
    ap.add_argument("--settle-s", type=float, default=0.5)
    ap.add_argument("--bursts", default="1,8,32,64,128")
    ap.add_argument("--running", default="0,64")
    ap.add_argument("--one-per-call-burst", type=int, default=32)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
