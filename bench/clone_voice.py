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

JSON goes to `--out/clone_voice.json` after every section (a failing section records its
error, the rest still run; sections past `--budget-s` are skipped); a short table is
printed last. On the GPU machine, from the repository root:

    PYTHONPATH=runtime python3 bench/clone_voice.py --out $OUT --size 1.7B --budget-s 300
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import time
import traceback

import numpy as np
import torch

from ttsfleet_runtime.benchmark import ready_checkpoint, run_sections

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
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import soxr

    results: dict = dict(
        started=datetime.datetime.now(datetime.UTC).isoformat(),
        host=socket.gethostname(),
        machine=platform.machine(),
        python=platform.python_version(),
        torch=torch.__version__,
        soxr=soxr.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        args=vars(args),
        sections={},
    )
    path = os.path.join(args.out, "clone_voice.json")

    def dump() -> None:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)

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
        run_sections(todo, sections, started=T0, budget_s=args.budget_s, dump=dump, log=log)
    results["seconds"] = round(time.time() - T0, 1)
    dump()
    print_table(results)


def print_table(results: dict) -> None:
    print(f"\nclone_voice, {results['args']['size']} Base, {results.get('gpu') or 'cpu'}")
    if "error" in results:
        print("start failed:", results["error"])
        return
    print(f"{'section':>16} {'median ms':>10} {'min ms':>8} {'frames':>7} {'peak GiB':>9}")
    for key, r in results["sections"].items():
        if "error" in r or "skipped" in r:
            print(f"{key:>16} {r.get('error') or r.get('skipped')}")
        elif key.startswith("parts_"):
            print(f"{key:>16} " + ", ".join(f"{k} {v} ms" for k, v in r.items()))
        else:
            print(
                f"{key:>16} {r['median_ms']:>10} {r['min_ms']:>8} {str(r['ref_frames']):>7} "
                f"{str(r.get('peak_extra_gib', '-')):>9}"
            )


if __name__ == "__main__":
    main()
