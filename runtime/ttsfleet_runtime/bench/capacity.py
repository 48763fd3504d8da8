"""Capacity of one GPU per model size, in one command: `ttsfleet serve` on a random
checkpoint, then `ttsfleet loadtest` against it (HTTP streaming, Poisson arrivals).

Per size (1.7B, then 0.6B):
  1. write the random checkpoint (`ttsfleet-runtime checkpoint --random`), unless present;
  2. serve it (--auth disabled, --max-audio-seconds 4: random weights never stop, so every
     utterance is 4 s), wait (up to 60 s) for the graphs it captures after ready, and
     climb the arrival rates until two in a row fail the knee thresholds (p95 TTFA
     <= 150 ms, < 1% of streams stalled, < 1% refused);
  3. restart it with --max-audio-seconds 10 --max-batch 256 (then 192, 128 if the larger
     one does not start) and send a burst of that many 10-second streams at once:
     `max_concurrent_streams` is the most streams the server ran at once (its
     ttsfleet_active_streams, sampled), which is the largest batch that ran.
Writes into --out: capacity.json (machine, versions, per size the load figures, the rate
summaries, the burst), per size SIZE/loadtest.json + SIZE/loadtest.png (raw samples) and
SIZE/burst.json, the server logs; capacity.json after every section. Sections that would
not finish within --budget-s are skipped (and say so). A short table is printed last.

    export PYTHONPATH=/tmp/site:runtime
    python3 -m ttsfleet_runtime bench capacity --out $OUT --budget-s 540
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .common import Budget, add_serve_arguments, add_tokenizer_rate_argument, checkpoint_path


def write_checkpoint(size: str, args, folder: Path) -> dict:
    ckpt = checkpoint_path(
        size,
        argparse.Namespace(model=None, ckpt_dir=args.ckpt_dir, tokenizer_rate=args.tokenizer_rate),
    )
    if os.path.exists(os.path.join(ckpt, "model.safetensors")):
        return {"checkpoint": ckpt, "written_s": 0.0}
    start = time.monotonic()
    with open(folder / "checkpoint.log", "w") as out:
        subprocess.run(
            [sys.executable, "-m", "ttsfleet_runtime", "checkpoint", "--random"]
            + ["--size", size, "--out", ckpt, "--device", args.device]
            + ["--tokenizer-rate", str(args.tokenizer_rate)],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=max(60.0, args.budget.left_s()),
        )
    return {"checkpoint": ckpt, "written_s": round(time.monotonic() - start, 1)}


def without_samples(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "samples"}


def rates_section(size: str, args, folder: Path, ckpt: str, end: float) -> dict:
    """The climb; it starts no rate that would end later than `end` (monotonic clock)."""
    from ttsfleet_runtime.loadtest.command import write_result
    from ttsfleet_runtime.loadtest.runner import LoadConfig, run_load
    from ttsfleet_runtime.loadtest.serve_process import Server, wait_background
    from ttsfleet_runtime.loadtest.texts import builtin_texts
    from ttsfleet_runtime.loadtest.timings import Thresholds

    server = Server(args, ckpt, folder / "serve-rates.log", args.max_batch, args.utterance_s)
    try:
        ready_s = server.wait_ready(min(args.ready_timeout_s, args.budget.left_s()))
        args.budget.log(f"{size}: server ready in {ready_s} s (max batch {args.max_batch})")
        # The rates measure the server as it runs for hours, not its first seconds: the
        # graphs it captures after ready hold its threads meanwhile (`bench startup`
        # measures those).
        background_s = wait_background(server.base, min(60.0, args.budget.left_s()))
        args.budget.log(f"{size}: graphs captured after ready in {background_s} s")
        config = LoadConfig(
            url=server.base,
            texts=builtin_texts(args.utterance_s),
            rates=args.rates,
            duration_s=args.duration_s,
            seed=args.seed,
            thresholds=Thresholds(),
            stop_after=args.stop_after,
            timeout_s=60.0,
            budget_s=max(0.0, end - time.monotonic()),
            progress=lambda line: args.budget.log(size, json.dumps(line)),
        )
        result = asyncio.run(run_load(config))
    finally:
        server.stop()
    result["serve_command"] = server.command
    written = write_result(result, folder)
    return {
        "ready_s": ready_s,
        "capture_background_s": background_s,
        "max_batch": args.max_batch,
        "files": {k: str(v.relative_to(args.out)) for k, v in written.items()},
        **without_samples(result),
    }


def burst_section(size: str, args, folder: Path, ckpt: str) -> dict:
    """The largest of --burst that starts and runs; the ones that did not, with why."""
    from ttsfleet_runtime.loadtest.runner import LoadConfig, run_load
    from ttsfleet_runtime.loadtest.serve_process import Server
    from ttsfleet_runtime.loadtest.texts import builtin_texts

    tried = []
    for streams in args.burst:
        if args.budget.left_s() < args.burst_seconds + 60:
            left = f"budget: {args.budget.left_s():.0f} s left"
            tried.append({"streams": streams, "skipped": left})
            break
        server = Server(
            args, ckpt, folder / f"serve-burst-{streams}.log", streams, args.burst_seconds
        )
        try:
            ready_s = server.wait_ready(
                min(args.ready_timeout_s, args.budget.left_s() - args.burst_seconds)
            )
            args.budget.log(f"{size}: burst server ready in {ready_s} s (max batch {streams})")
            config = LoadConfig(
                url=server.base,
                texts=builtin_texts(args.burst_seconds),
                concurrency=streams,
                seed=args.seed,
                warmup=1,
                timeout_s=args.burst_seconds * 12,
                stop_after=0,
                progress=lambda line: args.budget.log(size, json.dumps(line)),
            )
            result = asyncio.run(run_load(config))
        except Exception as exc:
            tried.append({"streams": streams, "error": repr(exc)[:2000]})
            args.budget.log(f"{size}: burst of {streams} failed: {exc!r}"[:400])
            continue
        finally:
            server.stop()
        (folder / "burst.json").write_text(json.dumps(result, indent=1) + "\n")
        burst = result["burst"]
        ran = burst["server"]["active_streams_max"]
        return {
            "streams": streams,
            "ready_s": ready_s,
            "tried": tried,
            # The server's own count when it exposes one, else what the client saw.
            "max_concurrent_streams": int(ran)
            if ran is not None
            else burst["concurrent_streams_seen"],
            **without_samples(result),
        }
    return {"tried": tried, "max_concurrent_streams": None}


def load_figures(rates: dict | None, burst: dict | None) -> dict:
    """The figures summary.json keeps per size (`bench summarise` copies them)."""
    summaries = (rates or {}).get("rates") or []

    def p95_at(rate: float):
        return next((r["ttfa_ms"]["p95"] for r in summaries if r["rate_rps"] == rate), None)

    return {
        "ttfa_p95_ms_at_10_rps": p95_at(10.0),
        "ttfa_p95_ms_at_20_rps": p95_at(20.0),
        "knee_rps": (rates or {}).get("knee_rps"),
        "max_concurrent_streams": (burst or {}).get("max_concurrent_streams"),
    }


def run_size(size: str, args, sizes_left: int, report: dict, save) -> None:
    folder = args.out / size
    folder.mkdir(parents=True, exist_ok=True)
    entry = report["sizes"].setdefault(size, {})
    # This size's share of what is left; the rates leave the burst its part of it
    # (a server start, the burst, the stop).
    share_end = time.monotonic() + args.budget.left_s() / sizes_left
    rates_end = share_end - (0 if args.no_burst else args.burst_seconds + 90)

    def ckpt() -> str:
        return entry["checkpoint"]["checkpoint"]

    sections = [("checkpoint", lambda: write_checkpoint(size, args, folder))]
    sections.append(("rates", lambda: rates_section(size, args, folder, ckpt(), rates_end)))
    if not args.no_burst:
        sections.append(("burst", lambda: burst_section(size, args, folder, ckpt())))
    for name, section in sections:
        if name != "checkpoint" and "checkpoint" not in entry:
            entry.setdefault("errors", {})[name] = "no checkpoint"
            continue
        start = time.monotonic()
        try:
            entry[name] = section()
        except Exception:
            entry.setdefault("errors", {})[name] = traceback.format_exc(limit=8)[-3000:]
            args.budget.log(f"{size}: {name} FAILED\n{entry['errors'][name]}")
        entry.setdefault("section_s", {})[name] = round(time.monotonic() - start, 1)
        entry["load"] = load_figures(entry.get("rates"), entry.get("burst"))
        save()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default="1.7B,0.6B")
    ap.add_argument("--rates", default="1,10,20,40,60,80,100,120,140,160,200")
    ap.add_argument("--duration-s", type=float, default=10.0, help="seconds of arrivals a rate")
    ap.add_argument(
        "--utterance-s", type=float, default=4.0, help="--max-audio-seconds of the rates"
    )
    ap.add_argument("--max-batch", type=int, default=128, help="serve --max-batch for the rates")
    add_tokenizer_rate_argument(ap)
    ap.add_argument(
        "--burst",
        default="256,192,128",
        help="streams at once: the first whose server starts and runs is reported",
    )
    ap.add_argument("--burst-seconds", type=float, default=10.0)
    ap.add_argument("--no-burst", action="store_true")
    ap.add_argument("--stop-after", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    add_serve_arguments(ap, budget_s=540.0)


def run(args: argparse.Namespace) -> int:
    from ttsfleet_runtime.loadtest.serve_process import report_head, report_saver

    options = argparse.Namespace(**vars(args))
    options.rates = [float(r) for r in args.rates.split(",")]
    options.burst = [int(n) for n in args.burst.split(",")]
    report = report_head("capacity", options)
    # The run's context: the options, and its clock and budget.
    args = argparse.Namespace(**vars(options), budget=Budget(args.budget_s))
    args.out.mkdir(parents=True, exist_ok=True)
    save = report_saver(report, args.out / "capacity.json", started=args.budget.started)

    save()
    sizes = args.sizes.split(",")
    for index, size in enumerate(sizes):
        if args.budget.left_s() < 60:
            report["sizes"][size] = {"skipped": f"budget: {args.budget.left_s():.0f} s left"}
            save()
            continue
        run_size(size, args, len(sizes) - index, report, save)
    save()
    print_table(report)
    return 0


HEADER = ("size", "rate", "reqs", "p50", "p95", "p99", "stall", "a-s/s", "429", "GiB")
WIDTHS = (5, 6, 5, 7, 7, 7, 6, 7, 5, 6)


def print_table(report: dict) -> None:
    print("\n" + " ".join(f"{h:>{w}}" for h, w in zip(HEADER, WIDTHS, strict=True)) + " pass")
    for size, entry in report["sizes"].items():
        for r in (entry.get("rates") or {}).get("rates") or []:
            t = r["ttfa_ms"]
            gib = r["server"]["gpu_memory_used_bytes_max"]
            print(
                f"{size:>5} {r['rate_rps']:>6g} {r['requests']:>5} "
                + " ".join(
                    f"{t[k]:>7.1f}" if t[k] is not None else f"{'-':>7}"
                    for k in ("p50", "p95", "p99")
                )
                + f" {(r['underrun_share'] or 0):>6.1%} {(r['audio_s_per_s'] or 0):>7.1f}"
                + f" {r['share']['429']:>5.0%} {(gib or 0) / 2**30:>6.1f} {'yes' if r['passed'] else 'no'}"
            )
        print(f"{size:>5} load: {json.dumps(entry.get('load'))}")
        if entry.get("errors"):
            print(f"{size:>5} errors in: {', '.join(entry['errors'])}")
