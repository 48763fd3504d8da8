#!/usr/bin/env python3
"""The runtime server on a GPU, end to end over HTTP: starts `ttsfleet serve` on a
checkpoint, streams speech at several concurrencies, and records time to first audio,
end-to-end time and throughput as clients see them, plus the server's own metrics.

    PYTHONPATH=runtime python3 bench/serve_check.py --model /tmp/ck --out $OUT

Writes serve_check.json (machine, versions, raw samples) and serve.log to --out. Stops at
once if the server process dies (its log tail is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx


def start_server(args) -> tuple[subprocess.Popen, Path]:
    log = Path(args.out) / "serve.log"
    command = [
        sys.executable,
        "-m",
        "ttsfleet_runtime.cli",
        "serve",
        "--model",
        args.model,
        "--device",
        args.device,
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--auth",
        "disabled",
        "--max-audio-seconds",
        str(args.audio_seconds),
        "--max-batch",
        str(max(args.concurrency)),
    ]
    return subprocess.Popen(command, stdout=open(log, "w"), stderr=subprocess.STDOUT), log


def wait_ready(process: subprocess.Popen, log: Path, base: str, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            sys.exit(
                f"ttsfleet serve exited with {process.returncode}:\n"
                + "".join(log.read_text().splitlines(True)[-30:])
            )
        try:
            if httpx.get(base + "/health/ready", timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    sys.exit(f"not ready after {timeout:.0f} s")


async def one_request(client: httpx.AsyncClient, model: str, i: int) -> dict:
    body = {
        "model": model,
        "input": f"Hello number {i}, streaming on the GPU.",
        "voice": "vivian",
        "response_format": "pcm",
        "stream_format": "audio",
    }
    t0 = time.perf_counter()
    first, size = None, 0
    async with client.stream("POST", "/v1/audio/speech", json=body) as response:
        if response.status_code != 200:
            return {
                "status": response.status_code,
                "error": (await response.aread()).decode()[:300],
            }
        async for chunk in response.aiter_bytes():
            if first is None and chunk:
                first = time.perf_counter() - t0
            size += len(chunk)
    return {
        "status": 200,
        "ttfa_s": first,
        "total_s": time.perf_counter() - t0,
        "audio_s": size / 2 / 24000,
    }


async def sweep(base: str, concurrency: list[int]) -> list[dict]:
    results = []
    async with httpx.AsyncClient(base_url=base, timeout=300) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        for n in concurrency:
            t0 = time.perf_counter()
            samples = await asyncio.gather(*[one_request(client, model, i) for i in range(n)])
            wall = time.perf_counter() - t0
            ok = [s for s in samples if s["status"] == 200]
            row = {"concurrency": n, "wall_s": wall, "samples": samples, "ok": len(ok)}
            if ok:
                ttfa = sorted(s["ttfa_s"] for s in ok)
                row |= {
                    "ttfa_ms_median": 1000 * statistics.median(ttfa),
                    "ttfa_ms_max": 1000 * ttfa[-1],
                    "audio_s_per_s": sum(s["audio_s"] for s in ok) / wall,
                }
            print(json.dumps({k: v for k, v in row.items() if k != "samples"}), flush=True)
            results.append(row)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument(
        "--audio-seconds",
        type=float,
        default=4.0,
        help="utterance length (random weights never stop)",
    )
    ap.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 1, 8, 32, 64]
    )
    ap.add_argument("--ready-timeout", type=float, default=400)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    base = f"http://127.0.0.1:{args.port}"
    process, log = start_server(args)
    try:
        ready_s = wait_ready(process, log, base, args.ready_timeout)
        print(f"ready after {ready_s:.1f} s", flush=True)
        rows = asyncio.run(sweep(base, args.concurrency))
        metrics = httpx.get(base + "/metrics").text
    finally:
        process.terminate()
        process.wait(timeout=60)
    import torch

    report = {
        "machine": platform.node(),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "model": args.model,
        "audio_seconds": args.audio_seconds,
        "ready_s": ready_s,
        "sweep": rows,
        "server_metrics": [line for line in metrics.splitlines() if line.startswith("ttsfleet_")],
    }
    Path(args.out, "serve_check.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
