#!/usr/bin/env python3
"""Where a loaded server's time goes: `ttsfleet serve` in this process, `ttsfleet loadtest`
against it from another, and while the load runs

- a torch.profiler window (`--profile-s`): every kernel of every CUDA stream, so the
  decode steps, packed prefills and codec calls show as time on the device, with the
  gaps between them (the host's share) and how much the codec stream overlaps the
  decode stream;
- a Python stack sampler (`--sample-s`, every 2 ms): per thread (engine, codec, the
  event loop), the functions the samples were in, self and inclusive: host overhead
  by name;

then the load climbs `--rates` with nothing attached (the loadtest JSON carries the
engine's busy share per phase from /metrics). The server runs in this process so the
profiler sees it; the load generator runs in its own so it does not share the GIL.

Writes into --out: server_profile.json (machine, versions, the timeline summary, the
top kernels, the stack tables), trace.json.gz (the chrome trace of the window),
profile-load/ and climb/ (loadtest.json + png). A short table is printed last.

    export PYTHONPATH=/tmp/site:runtime
    python3 bench/server_profile.py --out $OUT --size 1.7B --budget-s 500
CPU smoke run (tiny model, no CUDA timeline):
    python3 bench/server_profile.py --out /tmp/sp --size tiny --device cpu --rates 2 \
        --profile-rate 2 --duration-s 3
"""

from __future__ import annotations

import argparse
import collections
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import httpx

T0 = time.monotonic()


def log(*parts) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s]", *parts, flush=True)


def left_s(args) -> float:
    return args.budget_s - (time.monotonic() - T0)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--size", default="1.7B")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default=None, help="a checkpoint folder instead of a random one")
    ap.add_argument("--ckpt-dir", default=os.environ.get("TTSFLEET_CKPT_DIR", "/tmp/ttsfleet-ckpt"))
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--utterance-s", type=float, default=4.0)
    ap.add_argument("--profile-rate", type=float, default=60.0, help="arrivals/s while profiling")
    ap.add_argument("--profile-s", type=float, default=0.4, help="torch.profiler window")
    ap.add_argument("--sample-s", type=float, default=3.0, help="stack sampling window")
    ap.add_argument("--rates", default="40,60,80,100,120,160")
    ap.add_argument("--duration-s", type=float, default=8.0)
    ap.add_argument("--budget-s", type=float, default=500.0)
    ap.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting (settings.py field name), e.g. first_chunk_frames=1",
    )
    return ap.parse_args(argv)


# ---------------------------------------------------------------- the server, in-process
def start_server(args, ckpt: str):
    from ttsfleet_runtime import metrics
    from ttsfleet_runtime.server import json_logging
    from ttsfleet_runtime.server.app import create_app
    from ttsfleet_runtime.server.auth import ApiKeys
    from ttsfleet_runtime.server.serve import build_engine, uvicorn_server
    from ttsfleet_runtime.settings import SETTINGS, ServerSettings

    values = {
        "model": ckpt,
        "device": args.device,
        "host": "127.0.0.1",
        "port": args.port,
        "auth_disabled": True,
        "max_audio_seconds": args.utterance_s,
    }
    for item in args.setting:
        name, _, text = item.partition("=")
        values[name] = SETTINGS[name].parse(text)
    settings = ServerSettings(**values)
    json_logging.configure("warning")
    engine = build_engine(settings)
    gpu = metrics.NvmlReader() if args.device.startswith("cuda") else None
    app = create_app(engine, settings, ApiKeys(disabled=True), gpu=gpu)
    server = uvicorn_server(app, settings)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    return server, thread, values


def wait_ready(base: str, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if httpx.get(base + "/health/ready", timeout=2).status_code == 200:
                return round(time.monotonic() - start, 1)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"server not ready after {timeout_s:.0f} s")


def loadtest(args, base: str, rates: str, duration_s: float, out: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        *("-m", "ttsfleet_runtime.cli", "loadtest", "--url", base),
        *("--rates", rates, "--duration-s", f"{duration_s:g}", "--stop-after", "2"),
        *("--utterance-seconds", f"{args.utterance_s:g}", "--out", str(out)),
        *("--budget-s", f"{max(10.0, left_s(args) - 20):.0f}"),
    ]
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        command, stdout=open(out / "loadtest.log", "w"), stderr=subprocess.STDOUT
    )


# ---------------------------------------------------------------- the Python stack sampler
def sample_stacks(seconds: float, interval_s: float = 0.002) -> dict:
    """Per thread name: samples, and the top functions by self and inclusive samples."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    own: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    incl: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            name = names.get(ident, str(ident))
            totals[name] += 1
            seen = set()
            top = True
            while frame is not None:
                code = frame.f_code
                where = f"{Path(code.co_filename).name}:{code.co_name}"
                if top:
                    own[name][f"{where}:{frame.f_lineno}"] += 1
                    top = False
                if where not in seen:
                    incl[name][where] += 1
                    seen.add(where)
                frame = frame.f_back
        time.sleep(interval_s)
    return {
        name: {
            "samples": totals[name],
            "self": own[name].most_common(25),
            "inclusive": incl[name].most_common(40),
        }
        for name in totals
    }


# ---------------------------------------------------------------- the device timeline
def timeline(trace_path: Path) -> dict:
    """Kernels per CUDA stream from a chrome trace: busy time (union of kernel
    intervals), kernel counts, the time both streams ran kernels at once, and the
    window; plus the top kernels by total time."""
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        return {"kernels": 0}
    by_stream: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    names: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for e in kernels:
        stream = e.get("args", {}).get("stream", -1)
        by_stream[stream].append((e["ts"], e["ts"] + e["dur"]))
        names[e["name"][:90]] += e["dur"]
        counts[e["name"][:90]] += 1
    start = min(s for spans in by_stream.values() for s, _ in spans)
    end = max(t for spans in by_stream.values() for _, t in spans)

    def union(spans):
        merged = []
        for s, t in sorted(spans):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], t)
            else:
                merged.append([s, t])
        return merged

    unions = {stream: union(spans) for stream, spans in by_stream.items()}
    every = union([span for spans in by_stream.values() for span in spans])
    busy_any = sum(t - s for s, t in every)
    busy = {str(k): round(sum(t - s for s, t in v) / 1e3, 2) for k, v in unions.items()}
    gaps = sorted(
        (b[0] - a[1] for a, b in zip(every, every[1:], strict=False) if b[0] > a[1]), reverse=True
    )
    cpu = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e]
    launches = collections.Counter(e["name"] for e in cpu)
    return {
        "window_ms": round((end - start) / 1e3, 2),
        "kernels": len(kernels),
        "busy_ms_by_stream": busy,
        "kernels_by_stream": {str(k): len(v) for k, v in by_stream.items()},
        "busy_any_ms": round(busy_any / 1e3, 2),
        "overlap_ms": round(
            (sum(sum(t - s for s, t in v) for v in unions.values()) - busy_any) / 1e3, 2
        ),
        "idle_ms": round((end - start - busy_any) / 1e3, 2),
        "largest_gaps_us": [round(g, 1) for g in gaps[:20]],
        "gaps_over_100us": sum(g > 100 for g in gaps),
        "top_kernels_ms": [
            (name, round(us / 1e3, 3), counts[name]) for name, us in names.most_common(30)
        ],
        "runtime_calls": launches.most_common(15),
    }


def profile_window(args, out: Path) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        time.sleep(args.profile_s)
    trace = out / "trace.json"
    prof.export_chrome_trace(str(trace))
    gz = out / "trace.json.gz"
    with open(trace, "rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    trace.unlink()
    del torch
    return timeline(gz)


# ---------------------------------------------------------------- main
def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from ttsfleet_runtime.benchmark import ready_checkpoint

    result: dict = {
        "benchmark": "server_profile",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "python": platform.python_version()},
        "args": {k: str(v) for k, v in vars(args).items()},
        "sections": {},
    }

    def save():
        (args.out / "server_profile.json").write_text(json.dumps(result, indent=1, default=str))

    ckpt = ready_checkpoint(args.size, args)
    try:
        import torch

        result["versions"] = {"torch": torch.__version__, "cuda": torch.version.cuda}
        if torch.cuda.is_available():
            result["machine"]["gpu"] = torch.cuda.get_device_name()
    except Exception as exc:
        result["versions"] = {"error": repr(exc)}
    base = f"http://127.0.0.1:{args.port}"
    server, thread, settings = start_server(args, ckpt)
    result["settings"] = settings
    try:
        result["ready_s"] = wait_ready(base, min(300.0, left_s(args)))
        log(f"server ready in {result['ready_s']} s")
        save()
        # 1. profile and sample under a steady load
        try:
            window = args.duration_s + 8
            proc = loadtest(args, base, f"{args.profile_rate:g}", window, args.out / "profile-load")
            time.sleep(min(8.0, window / 2))  # warm-up request + the load settling
            section = {"rate_rps": args.profile_rate}
            section["timeline"] = profile_window(args, args.out)
            log(
                "profiled",
                json.dumps({k: v for k, v in section["timeline"].items() if k != "top_kernels_ms"}),
            )
            section["stacks"] = sample_stacks(args.sample_s)
            proc.wait(timeout=max(30.0, left_s(args)))
            result["sections"]["profile"] = section
        except Exception:
            result["sections"]["profile"] = {"error": traceback.format_exc()}
        save()
        # 2. the climb, nothing attached
        try:
            if left_s(args) > 60:
                proc = loadtest(args, base, args.rates, args.duration_s, args.out / "climb")
                proc.wait(timeout=max(30.0, left_s(args)))
                climb = json.loads((args.out / "climb" / "loadtest.json").read_text())
                result["sections"]["climb"] = {
                    "knee_rps": climb.get("knee_rps"),
                    "rates": climb.get("rates"),
                }
            else:
                result["sections"]["climb"] = {"skipped": f"budget: {left_s(args):.0f} s left"}
        except Exception:
            result["sections"]["climb"] = {"error": traceback.format_exc()}
        save()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    save()
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    prof = result["sections"].get("profile", {})
    tl = prof.get("timeline", {})
    print("\n== device timeline at", prof.get("rate_rps"), "req/s ==")
    for key in (
        "window_ms",
        "kernels",
        "busy_ms_by_stream",
        "busy_any_ms",
        "overlap_ms",
        "idle_ms",
        "gaps_over_100us",
    ):
        print(f"  {key}: {tl.get(key)}")
    for name, ms, n in tl.get("top_kernels_ms", [])[:12]:
        print(f"  {ms:8.2f} ms {n:6d}x  {name}")
    for thread, table in prof.get("stacks", {}).items():
        print(f"\n== {thread}: {table['samples']} samples; inclusive top ==")
        for where, n in table["inclusive"][:15]:
            print(f"  {n:6d}  {where}")
    climb = result["sections"].get("climb", {})
    print("\n== climb: knee", climb.get("knee_rps"), "==")
    for r in climb.get("rates") or []:
        server = r.get("server", {})
        print(
            f"  {r['rate_rps']:6.1f}/s ttfa p50/p95 {r['ttfa_ms']['p50']}/{r['ttfa_ms']['p95']} ms"
            f" underrun {r['underrun_share']} audio-s/s {r['audio_s_per_s']}"
            f" active {server.get('active_streams_mean')} busy {server.get('engine_busy_share')}"
        )


if __name__ == "__main__":
    sys.exit(main())
