"""What cloning a voice costs on the GPU: `TTSEngine.clone_voice` on 5 s and 15 s recordings.

A random Base checkpoint at real size (written into --ckpt-dir if missing, or --model),
an engine over it (not started: cloning needs only the encoders, which `clone_voice`
loads on first use), then per recording length: in-context cloning (transcript given:
speaker embedding + reference codes), x-vector-only (embedding alone), and in-context
from 44.1 kHz (resampling included). Each is timed end to end as a caller sees it
(wall clock: `clone_voice` returns host arrays, so it has waited for its CUDA stream),
`--iters` times after `--warmup` calls, median reported; the parts (resampling, speaker
encoder, codec encoder) are timed the same way once per length. Peak GPU memory of the
clones is recorded too.

Last, what a cloned voice costs when speaking it (`ttfa`): time to first audio at batch 1
through the engine API (`benchmark.run_one`, the engine benchmark's text and request;
the server adds the same to every voice), `--ttfa-runs` times after a warm-up, for the
clones above (x-vector from the first length, in context from each) on a started Base
engine, then for the built-in speaker ryan on the CustomVoice checkpoint of the same
size (--custom-voice-model, or a random one). Each voice records its prompt's length:
in-context cloning lengthens it by the recording's frames.

JSON goes to `--out/clone_voice.json` after every section (a failing section records its
error, the rest still run; sections past `--budget-s` are skipped); a short table is
printed last. On the GPU machine, from the repository root:

    PYTHONPATH=runtime python3 bench/clone_voice.py --out $OUT --size 1.7B --budget-s 420
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import traceback

import numpy as np
import torch

from ttsfleet_runtime.benchmark import (
    json_writer,
    ready_checkpoint,
    report_start,
    run_one,
    run_sections,
)

T0 = time.time()
TRANSCRIPT = "The quick brown fox jumps over the lazy dog while the orchestra tunes up."


def log(*parts) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *parts, flush=True)


def recording(seconds: float, rate: int) -> np.ndarray:
    """A voiced-sounding signal (gliding harmonics in noise) of this length."""
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(140 + 30 * np.sin(2 * np.pi * 0.5 * t)) / rate
    tone = sum(np.sin(k * phase) / k for k in range(1, 6))
    return (0.3 * tone + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def wall_ms(fn, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return samples


def summary(samples: list[float]) -> dict:
    return dict(
        median_ms=round(statistics.median(samples), 2),
        min_ms=round(min(samples), 2),
        max_ms=round(max(samples), 2),
        samples_ms=[round(s, 3) for s in samples],
    )


def start_engine(args):
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    t = time.time()
    ckpt = ready_checkpoint(args.size, args, variant="Base")
    info: dict = dict(checkpoint=ckpt, checkpoint_write_s=round(time.time() - t, 1))
    engine = TTSEngine.from_pretrained(ckpt, args.device, dtype=args.dtype)
    t = time.time()
    encoders = engine.voice_encoders
    info["encoders_load_s"] = round(time.time() - t, 2)
    info["speaker_encoder_params_m"] = round(
        sum(p.numel() for p in encoders.speaker.parameters()) / 1e6, 2
    )
    info["codec_encoder_params_m"] = round(
        sum(p.numel() for p in encoders.codec.parameters()) / 1e6, 2
    )
    return engine, info


def clone_section(engine, seconds: float, rate: int, transcript, args) -> dict:
    audio = recording(seconds, rate)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    samples = wall_ms(lambda: engine.clone_voice(audio, rate, transcript), args.warmup, args.iters)
    out = dict(seconds=seconds, rate=rate, in_context=transcript is not None, **summary(samples))
    voice = engine.clone_voice(audio, rate, transcript)
    out["ref_frames"] = None if voice.ref_codes is None else int(voice.ref_codes.shape[0])
    if args.device.startswith("cuda"):
        out["peak_extra_gib"] = round((torch.cuda.max_memory_allocated() - before) / 2**30, 3)
    return out


def parts_section(engine, seconds: float, args) -> dict:
    """The parts of one in-context clone from 44.1 kHz, each timed alone."""
    from ttsfleet_runtime.engine.resampling import resample

    encoders = engine.voice_encoders
    audio = recording(seconds, 44100)
    at_24k = torch.from_numpy(resample(audio, 44100, 24000))

    def on_device(fn):
        def run():
            with encoders.device_scope():
                fn().cpu()

        return run

    parts = {
        "resample_44k1_to_24k": lambda: resample(audio, 44100, 24000),
        "speaker_encoder": on_device(lambda: encoders.speaker.embed(at_24k)),
        "codec_encoder": on_device(lambda: encoders.codec.encode(at_24k)),
    }
    return {
        name: summary(wall_ms(fn, args.warmup, args.iters))["median_ms"]
        for name, fn in parts.items()
    }


async def started_engine(ckpt: str, args):
    """An engine started as `serve` starts one (start-up graphs, warm-up on a GPU),
    with a few slots (batch-1 timing needs no more), once its background captures end."""
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    engine = TTSEngine.from_pretrained(
        ckpt,
        args.device,
        dtype=args.dtype,
        max_batch=4,
        cuda_graphs=args.device.startswith("cuda"),
        kv_cache_memory=0.2,
    )
    await engine.start()
    # No captures mid-timing: with graphs, bucket 2 is left for after ready, and the
    # capture_background phase is recorded once the last graph is captured.
    deadline = time.monotonic() + 300
    while engine.runner.use_graphs and "capture_background" not in engine.stats().startup_seconds:
        if time.monotonic() > deadline:
            raise TimeoutError("the graphs left for after ready took over 300 s")
        await asyncio.sleep(0.05)
    return engine


async def ttfa_of(engine, cloned, args) -> dict:
    voice = engine.builder.voice(None if cloned else "ryan", None, "english", cloned)
    await asyncio.wait_for(run_one(engine, 8, seed=1, cloned=cloned), 120)  # warm-up
    runs = [
        await asyncio.wait_for(run_one(engine, 4, seed=100 + i, cloned=cloned), 60)
        for i in range(args.ttfa_runs)
    ]
    ttfa = [r["ttfa_ms"] for r in runs]
    return dict(
        prompt_positions=engine.builder.prompt_length(voice),
        ref_frames=None if cloned is None or cloned.ref_codes is None else len(cloned.ref_codes),
        ttfa_ms_median=round(statistics.median(ttfa), 2),
        ttfa_ms_min=min(ttfa),
        ttfa_ms_max=max(ttfa),
        ttfa_from_admission_ms_median=round(
            statistics.median(r["ttfa_from_admission_ms"] for r in runs), 2
        ),
        samples_ms=ttfa,
    )


async def ttfa_section(cloner, args) -> dict:
    """TTFA of each cloned voice on the Base checkpoint, then of a built-in speaker on
    the CustomVoice one; a voice that fails records its error, the others still run."""
    lengths = [float(x) for x in args.lengths.split(",")]
    clones = {f"xvector_{lengths[0]:g}s": (lengths[0], None)}
    clones |= {f"icl_{seconds:g}s": (seconds, TRANSCRIPT) for seconds in lengths}
    voices = {
        key: cloner.clone_voice(recording(seconds, 24000), 24000, transcript)
        for key, (seconds, transcript) in clones.items()
    }
    custom_voice = argparse.Namespace(**{**vars(args), "model": args.custom_voice_model})
    plan = [
        (ready_checkpoint(args.size, args, "Base"), voices),
        (ready_checkpoint(args.size, custom_voice, "CustomVoice"), {"built_in_ryan": None}),
    ]
    out: dict = {}
    for ckpt, todo in plan:
        engine = await started_engine(ckpt, args)
        try:
            for key, cloned in todo.items():
                try:
                    out[key] = await ttfa_of(engine, cloned, args)
                    log("ttfa", key, {k: v for k, v in out[key].items() if k != "samples_ms"})
                except Exception as e:
                    out[key] = dict(error=repr(e), traceback=traceback.format_exc()[-3000:])
                    log("ttfa", key, "FAILED", traceback.format_exc())
        finally:
            await engine.stop(drain_timeout_s=0)
            del engine
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--size", default="1.7B", choices=["tiny", "0.6B", "1.7B"])
    ap.add_argument("--model", default="", help="a Base checkpoint folder instead of a random one")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", help="the engine's (the encoders run float32)")
    ap.add_argument("--lengths", default="5,15", help="recording seconds")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--ttfa-runs", type=int, default=10)
    ap.add_argument(
        "--custom-voice-model",
        default="",
        help="the CustomVoice checkpoint whose built-in speaker the clones' TTFA is compared "
        "with (default: a random one of --size)",
    )
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import soxr

    results = report_start(args, soxr=soxr.__version__)
    dump = json_writer(os.path.join(args.out, "clone_voice.json"), results)

    sections = results["sections"]
    engine = None
    try:
        engine, results["start"] = start_engine(args)
        log("start", results["start"])
    except Exception as e:
        results["error"] = repr(e)
        results["traceback"] = traceback.format_exc()[-3000:]
        log("start FAILED", traceback.format_exc())
    dump()
    if engine is not None:
        todo = []
        for seconds in (float(s) for s in args.lengths.split(",")):
            todo += [
                (
                    f"icl_{seconds:g}s",
                    lambda s=seconds: clone_section(engine, s, 24000, TRANSCRIPT, args),
                ),
                (
                    f"xvector_{seconds:g}s",
                    lambda s=seconds: clone_section(engine, s, 24000, None, args),
                ),
                (
                    f"icl_44k1_{seconds:g}s",
                    lambda s=seconds: clone_section(engine, s, 44100, TRANSCRIPT, args),
                ),
                (f"parts_{seconds:g}s", lambda s=seconds: parts_section(engine, s, args)),
            ]
        todo.append(("ttfa", lambda: asyncio.run(ttfa_section(engine, args))))
        run_sections(
            todo,
            sections,
            started=T0,
            budget_s=args.budget_s,
            dump=dump,
            log=log,
            # Samples and the TTFA section's voices (logged one by one) left out.
            describe=lambda r: {k: v for k, v in r.items() if not isinstance(v, list | dict)},
        )
    results["seconds"] = round(time.time() - T0, 1)
    dump()
    print_table(results)


def print_table(results: dict) -> None:
    print(f"\nclone_voice, {results['args']['size']} Base, {results.get('gpu') or 'cpu'}")
    if "error" in results:
        print("start failed:", results["error"])
        return
    print(f"{'section':>16} {'median ms':>10} {'min ms':>8} {'frames':>7} {'peak GiB':>9}")
    sections = results["sections"]
    for key, r in sections.items():
        if "error" in r or "skipped" in r:
            print(f"{key:>16} {r.get('error') or r.get('skipped')}")
        elif key == "ttfa":
            continue
        elif key.startswith("parts_"):
            print(f"{key:>16} " + ", ".join(f"{k} {v} ms" for k, v in r.items()))
        else:
            print(
                f"{key:>16} {r['median_ms']:>10} {r['min_ms']:>8} {str(r['ref_frames']):>7} "
                f"{str(r.get('peak_extra_gib', '-')):>9}"
            )

    ttfa = sections.get("ttfa")
    if ttfa and "error" not in ttfa and "skipped" not in ttfa:
        print(f"\n{'TTFA, batch 1':>16} {'median ms':>10} {'min ms':>8} {'prompt':>7}")
        for key, r in ttfa.items():
            if "error" in r:
                print(f"{key:>16} {r['error']}")
            else:
                print(
                    f"{key:>16} {r['ttfa_ms_median']:>10} {r['ttfa_ms_min']:>8} "
                    f"{r['prompt_positions']:>7}"
                )


if __name__ == "__main__":
    main()
