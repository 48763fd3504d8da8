"""Process start -> ready of `ttsfleet serve`, per model size, with a cold and a warm
compile cache: where a new pod's first seconds go (issue 14).

Per size (1.7B, then 0.6B):
  1. write the random checkpoint (`common.ready_checkpoint`), unless present or --model;
  2. cold: empty --cache-dir/SIZE, start `serve --compile-cache-dir` on it and time
     the process's start (just before it is spawned) to the first 200 of /health/ready
     (polled every 0.1 s); scrape `ttsfleet_startup_seconds{phase}` from /metrics; with
     --burst N send N streamed requests at once while the graphs left for after ready
     are captured (each must be served); send one short streamed request and
     time its first audio byte (the warm-up should have paid every first-call cost);
     wait (up to --background-s) for the graphs captured after ready
     (`capture_background`); stop the server;
  3. warm: the same on the same cache directory, now filled by the cold start.
`startup_s` is the warm start's wall seconds to ready (what an autoscaled pod with a
cache volume pays), `startup_s_cold` the cold one's; `bench summarise` copies both.
Writes startup.json into --out after every section (machine, versions, per size and
start the wall time, the server's phases, the first request, the /metrics lines, the
server log's path). A short table is printed last.

    export PYTHONPATH=/tmp/site:runtime
    python3 -m ttsfleet_runtime bench startup --out $OUT --sizes 1.7B,0.6B --budget-s 540
    python3 -m ttsfleet_runtime bench startup --out /tmp/s --sizes tiny --device cpu --budget-s 300  # CPU check
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ttsfleet_runtime import metrics

from .common import Budget, add_tokenizer_rate_argument, ready_checkpoint

STARTS = ("cold", "warm")


def release_device_memory() -> None:
    """Give back what writing a random checkpoint on the GPU cached in this process,
    so the servers it starts see the device's memory as a pod would."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def first_request(base: str, text: str = "The first request after start.") -> dict:
    """One short streamed synthesis right after ready: ms to its first audio byte."""
    import httpx

    model = httpx.get(base + "/v1/models", timeout=10).json()["data"][0]
    body = {
        "model": model["id"],
        "input": text,
        "voice": (model["speakers"] or [None])[0],
        "response_format": "pcm",
        "stream_format": "audio",
    }
    start = time.monotonic()
    first = None
    size = 0
    with httpx.stream("POST", base + "/v1/audio/speech", json=body, timeout=120) as response:
        response.raise_for_status()
        for piece in response.iter_bytes():
            if piece and first is None:
                first = time.monotonic() - start
            size += len(piece)
    return {
        "ttfa_ms": round(first * 1000, 1) if first is not None else None,
        "seconds": round(time.monotonic() - start, 3),
        "audio_s": round(size / 2 / model["sample_rate"], 3),
    }


def burst(base: str, streams: int) -> dict:
    """`streams` requests at once right after ready, while the graphs left for after
    ready are being captured: each must be served, none may fail."""
    with ThreadPoolExecutor(streams) as pool:
        calls = [
            pool.submit(first_request, base, f"Request {i} of a burst right after ready.")
            for i in range(streams)
        ]
    results, errors = [], []
    for call in calls:
        try:
            results.append(call.result())
        except Exception as error:
            errors.append(repr(error)[-300:])
    ttfa = sorted(r["ttfa_ms"] for r in results if r["ttfa_ms"] is not None)
    return {
        "streams": streams,
        "served": len(results),
        "ttfa_ms_median": ttfa[len(ttfa) // 2] if ttfa else None,
        "ttfa_ms_max": ttfa[-1] if ttfa else None,
        "errors": errors[:3],
    }


def one_start(size: str, start: str, args, folder: Path, ckpt: str, cache: Path) -> dict:
    import httpx

    from ttsfleet_runtime.loadtest.serve_process import Server, startup_phases, wait_background

    serve_args = argparse.Namespace(
        port=args.port,
        device=args.device,
        serve_flag=["--compile-cache-dir", str(cache), *args.serve_flag],
    )
    spawned = time.monotonic()
    server = Server(serve_args, ckpt, folder / f"serve-{start}.log", args.max_batch, 2.0)
    result: dict = {"log": str((folder / f"serve-{start}.log").relative_to(args.out))}
    try:
        server.wait_ready(min(args.ready_timeout_s, args.budget.left_s()), poll_s=0.1)
        result["wall_ready_s"] = round(time.monotonic() - spawned, 2)
        result["phases"] = startup_phases(server.base)
        args.budget.log(
            f"{size} {start}: ready in {result['wall_ready_s']} s: {json.dumps(result['phases'])}"
        )
        sections = [("first_request", lambda: first_request(server.base))]
        if args.burst:
            sections.insert(0, ("burst", lambda: burst(server.base, args.burst)))
        for name, section in (
            *sections,
            (
                "capture_background_s",
                lambda: wait_background(server.base, min(args.background_s, args.budget.left_s())),
            ),
        ):
            try:
                result[name] = section()
            except Exception:
                result.setdefault("errors", {})[name] = traceback.format_exc(limit=4)[-2000:]
        result["phases"] = startup_phases(server.base)
        result["metrics_lines"] = [
            line
            for line in httpx.get(server.base + "/metrics", timeout=10).text.splitlines()
            if line.startswith(metrics.STARTUP_SECONDS)
        ]
    finally:
        server.stop()
    result["serve_command"] = server.command
    return result


def run_size(size: str, args, report: dict, save) -> None:
    folder = args.out / size
    folder.mkdir(parents=True, exist_ok=True)
    entry = report["sizes"].setdefault(size, {})
    cache = args.cache_dir / size
    entry["compile_cache_dir"] = str(cache)
    try:
        started = time.monotonic()
        entry["checkpoint"] = ready_checkpoint(size, args)
        entry["checkpoint_ready_s"] = round(time.monotonic() - started, 1)
        release_device_memory()
    except Exception:
        entry.setdefault("errors", {})["checkpoint"] = traceback.format_exc(limit=6)[-3000:]
        save()
        return
    for start in STARTS:
        if args.budget.left_s() < 30:
            entry[start] = {"skipped": f"budget: {args.budget.left_s():.0f} s left"}
            continue
        if start == "cold":
            shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        try:
            entry[start] = one_start(size, start, args, folder, entry["checkpoint"], cache)
        except Exception:
            entry.setdefault("errors", {})[start] = traceback.format_exc(limit=6)[-3000:]
            args.budget.log(f"{size} {start}: FAILED\n{entry['errors'][start]}")
        save()
    entry["startup_s"] = (entry.get("warm") or {}).get("wall_ready_s")
    entry["startup_s_cold"] = (entry.get("cold") or {}).get("wall_ready_s")
    save()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default="1.7B,0.6B", help="1.7B, 0.6B or tiny (CPU checks)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-batch", type=int, default=256, help="serve --max-batch (its default)")
    add_tokenizer_rate_argument(ap)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--model", help="a checkpoint folder to serve instead of the random one")
    ap.add_argument(
        "--cache-dir",
        type=Path,
        default=Path("/tmp/ttsfleet-startup-cache"),
        help="compile caches, one folder per size (emptied before the cold start)",
    )
    ap.add_argument("--ready-timeout-s", type=float, default=300.0)
    ap.add_argument(
        "--background-s",
        type=float,
        default=60.0,
        help="how long to wait after ready for the background captures to finish",
    )
    ap.add_argument(
        "--burst",
        type=int,
        default=0,
        help="this many requests at once right after ready, before the first request "
        "(0: none); checks that they are served while the remaining graphs are captured",
    )
    ap.add_argument(
        "--serve-flag",
        action="append",
        default=[],
        help="one more `serve` argument, as --serve-flag=--kv-cache-memory --serve-flag=0.3",
    )
    ap.add_argument("--budget-s", type=float, default=540.0)


def run(args: argparse.Namespace) -> int:
    from ttsfleet_runtime.loadtest.serve_process import report_head, report_saver

    report = report_head("startup", args)  # the options as given
    # The run's context: the options, and its clock and budget.
    args = argparse.Namespace(**vars(args), budget=Budget(args.budget_s))
    args.out.mkdir(parents=True, exist_ok=True)
    save = report_saver(report, args.out / "startup.json", started=args.budget.started)

    save()
    for size in args.sizes.split(","):
        if args.budget.left_s() < 60:
            report["sizes"][size] = {"skipped": f"budget: {args.budget.left_s():.0f} s left"}
            continue
        run_size(size, args, report, save)
    save()
    print_table(report)
    return 0


COLUMNS = (
    ("import", "import"),
    ("load_weights", "load"),
    ("compile", "compile"),
    ("capture_decode_graphs", "decode"),
    ("capture_prefill_graphs", "prefill"),
    ("capture_codec_graphs", "codec"),
    ("warm_up", "warm-up"),
    ("total", "total"),
    ("capture_background", "bg"),
)


def print_table(report: dict) -> None:
    header = ["size", "start", "wall"] + [short for _, short in COLUMNS] + ["ttfa_ms"]
    widths = [5, 5, 6] + [max(7, len(short)) for _, short in COLUMNS] + [7]
    print("\n" + " ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for size, entry in report["sizes"].items():
        for start in STARTS:
            run = entry.get(start) or {}
            phases = run.get("phases") or {}
            cells = [size, start, run.get("wall_ready_s")]
            cells += [phases.get(phase) for phase, _ in COLUMNS]
            cells.append((run.get("first_request") or {}).get("ttfa_ms"))
            print(
                " ".join(
                    f"{c:>{w}.2f}"
                    if isinstance(c, float)
                    else f"{c if c is not None else '-':>{w}}"
                    for c, w in zip(cells, widths, strict=True)
                )
            )
        if entry.get("errors"):
            print(f"{size:>5} errors in: {', '.join(entry['errors'])}")
    print("(seconds; wall = spawn -> /health/ready 200; bg = graphs captured after ready)")
