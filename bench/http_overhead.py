#!/usr/bin/env python3
"""What the HTTP layer costs the server's CPU per streamed request, without a model.

The real app (`create_app`) under real uvicorn, configured as `ttsfleet serve` configures
it (`serve.uvicorn_config`) but for the HTTP protocol class, runs in a child process over
an engine that costs next to nothing: each request gets `--chunks` chunks of precomputed
PCM (a 4 s utterance by default, first chunk 2 frames, then ~6 each, as the real engine
streams it), `--chunk-interval-s` apart. This process drives `--requests` streaming
POST /v1/audio/speech (raw PCM) with httpx, `--concurrency` at a time over keep-alive
connections, and reads the server's CPU time (utime + stime of /proc/<pid>/stat, all
threads, and of its event-loop thread alone) before and after. What differs between the
protocols is the HTTP layer alone: the app, its PCM encoding and the engine stand-in are
the same code.

Protocols (`--protocols`, comma-separated):
- h11-guarded: http_protocol.GuardedH11Protocol (head deadline, head-size limit, JSON errors)
- httptools-guarded: http_protocol.GuardedHttpToolsProtocol, the same guarantees
- h11, httptools: uvicorn's own classes, unguarded (what the guards cost)

Each repeat starts a fresh server per protocol, in turn, so drift on the machine (the
client shares it) falls on every protocol alike. Writes --out/http_overhead.json: machine,
versions, settings, raw samples per repeat and protocol, medians; prints a table.

    python3 bench/http_overhead.py --out /tmp/http-overhead
    python3 bench/http_overhead.py --out $OUT --requests 2000 --concurrency 64 --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

API_KEY = "bench-http-overhead"
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920  # 12.5 codec frames a second
PROTOCOLS = ("h11-guarded", "httptools-guarded", "h11", "httptools")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for http_overhead.json")
    ap.add_argument("--protocols", default="h11-guarded,httptools-guarded")
    ap.add_argument("--requests", type=int, default=600, help="measured requests per sample")
    ap.add_argument("--warmup", type=int, default=60, help="requests before measuring")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--audio-s", type=float, default=4.0)
    ap.add_argument("--chunks", type=int, default=9)
    ap.add_argument("--chunk-interval-s", type=float, default=0.01)
    ap.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="uvicorn's event loop (auto, as `ttsfleet serve`: uvloop where it imports)",
    )
    ap.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="let server and client share every CPU (default: server on the first, "
        "client on the others, where there are two or more)",
    )
    ap.add_argument("--serve", choices=PROTOCOLS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve is None and args.out is None:
        ap.error("--out is required")
    return args


def chunk_frames(audio_s: float, chunks: int) -> list[int]:
    """Frames per chunk: 2 first (the server's quick first chunk), the rest spread evenly."""
    frames = max(chunks, round(audio_s * SAMPLE_RATE / SAMPLES_PER_FRAME))
    if chunks == 1:
        return [frames]
    first = min(2, frames - (chunks - 1))
    rest, extra = divmod(frames - first, chunks - 1)
    return [first] + [rest + (i < extra) for i in range(chunks - 1)]


# ---- the server side (child process) ------------------------------------------------------


class PrecomputedEngine:
    """engine/api.py's Engine at no cost: every stream hands out the same precomputed
    chunks, one per `interval_s`. (tests/support/stand_in_engine.py computes a tone per
    chunk on the event loop, which this benchmark would count as server CPU.)"""

    def __init__(self, frames_per_chunk: list[int], interval_s: float):
        from ttsfleet_runtime.engine import api

        self.api = api
        self.info = api.ModelInfo(
            name="http-overhead-stand-in",
            size="tiny",
            variant="CustomVoice",
            tokenizer_rate_hz=12,
            sample_rate=SAMPLE_RATE,
            frame_rate_hz=SAMPLE_RATE / SAMPLES_PER_FRAME,
            samples_per_frame=SAMPLES_PER_FRAME,
            speakers=("Vivian",),
            languages=("auto",),
            supports_instructions=False,
            supports_voice_clone=False,
        )
        import numpy as np

        self.pcm = [
            (0.3 * np.sin(np.arange(n * SAMPLES_PER_FRAME) / 20.0)).astype(np.float32)
            for n in frames_per_chunk
        ]
        self.frames_per_chunk = frames_per_chunk
        self.interval_s = interval_s
        self.ready = False
        self.frames_total = 0
        self.active = 0

    async def start(self) -> None:
        self.ready = True

    def clone_voice(self, audio, sample_rate, transcript):
        raise self.api.InvalidRequest("no cloning here")

    def submit(self, request):
        return _PrecomputedStream(self, request)

    def stats(self):
        return self.api.EngineStats(
            queue_depth=0,
            active=self.active,
            max_batch=1 << 20,
            max_queue=1 << 20,
            frames_total=self.frames_total,
        )

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        self.ready = False


class _PrecomputedStream:
    def __init__(self, engine: PrecomputedEngine, request):
        self.engine = engine
        self.request_id = request.request_id
        self.finish_reason = None
        self.error = None

    def cancel(self) -> None:
        self.finish_reason = self.finish_reason or "cancelled"

    def release(self) -> None:
        self.cancel()

    async def __aiter__(self):
        engine = self.engine
        engine.active += 1
        t_admitted = time.monotonic()
        try:
            chunks = zip(engine.pcm, engine.frames_per_chunk, strict=True)
            for index, (pcm, frames) in enumerate(chunks):
                await asyncio.sleep(engine.interval_s)
                if self.finish_reason is not None:
                    return
                engine.frames_total += frames
                yield engine.api.AudioChunk(
                    pcm, SAMPLE_RATE, index, frames, t_admitted, time.monotonic()
                )
            self.finish_reason = "eos"
        finally:
            engine.active -= 1


def protocol_class(name: str, settings):
    from ttsfleet_runtime.server import http_protocol

    limits = (settings.http_header_timeout_s, settings.max_header_bytes)
    if name == "h11-guarded":
        return http_protocol.guarded_h11_protocol(*limits)
    if name == "httptools-guarded":
        return http_protocol.guarded_httptools_protocol(*limits)
    return name  # uvicorn's own, by its name


def serve(args) -> None:
    """The child: the app under uvicorn on 127.0.0.1:--port until SIGTERM."""
    import uvicorn

    from ttsfleet_runtime.server.app import create_app
    from ttsfleet_runtime.server.auth import ApiKeys
    from ttsfleet_runtime.server.serve import uvicorn_config
    from ttsfleet_runtime.settings import ServerSettings

    settings = ServerSettings(host="127.0.0.1", port=args.port, max_audio_seconds=60.0)
    engine = PrecomputedEngine(chunk_frames(args.audio_s, args.chunks), args.chunk_interval_s)
    app = create_app(engine, settings, ApiKeys((API_KEY,)))
    config = uvicorn_config(
        app,
        settings,
        http=protocol_class(args.serve, settings),
        loop=args.loop,
    )
    uvicorn.Server(config).run()


# ---- the client side (this process) -------------------------------------------------------


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(protocol: str, args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, __file__, "--serve", protocol, "--port", str(port)]
    command += ["--audio-s", str(args.audio_s), "--chunks", str(args.chunks)]
    command += ["--chunk-interval-s", str(args.chunk_interval_s), "--loop", args.loop]
    if args.server_cpu is not None:
        command = ["taskset", "-c", str(args.server_cpu)] + command
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base_url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{protocol} server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(base_url + "/health/ready", timeout=2).status_code == 200:
                return proc, base_url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{protocol} server did not get ready")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def drive(base_url: str, n: int, concurrency: int, expected_bytes: int) -> dict:
    """n streaming requests, `concurrency` at a time; every one must stream it all."""
    import httpx

    body = {"model": "http-overhead-stand-in", "voice": "Vivian", "input": "Hello there."}
    body["response_format"] = "pcm"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    left = n
    failures: list[str] = []
    reads = 0

    async def worker(client):
        nonlocal left, reads
        while left > 0:
            left -= 1
            async with client.stream("POST", "/v1/audio/speech", json=body) as response:
                got = 0
                async for part in response.aiter_raw():
                    got += len(part)
                    reads += 1
            if response.status_code != 200 or got != expected_bytes:
                failures.append(f"{response.status_code}: {got} of {expected_bytes} bytes")

    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=60
    ) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return {"failures": failures, "reads": reads}


def measure(protocol: str, args) -> dict:
    frames = chunk_frames(args.audio_s, args.chunks)
    expected = sum(frames) * SAMPLES_PER_FRAME * 2  # s16le
    proc, base_url = start_server(protocol, args)
    try:
        warm = asyncio.run(drive(base_url, args.warmup, args.concurrency, expected))
        cpu0, loop0 = cpu_seconds(proc.pid), cpu_seconds(proc.pid, proc.pid)
        t0 = time.perf_counter()
        run = asyncio.run(drive(base_url, args.requests, args.concurrency, expected))
        wall = time.perf_counter() - t0
        cpu, loop = cpu_seconds(proc.pid) - cpu0, cpu_seconds(proc.pid, proc.pid) - loop0
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
    finally:
        stop_server(proc)
    failures = warm["failures"] + run["failures"]
    return {
        "protocol": protocol,
        "requests": args.requests,
        "wall_s": round(wall, 4),
        "server_cpu_s": round(cpu, 3),
        "loop_thread_cpu_s": round(loop, 3),
        "server_threads": threads,
        "cpu_ms_per_request": round(1000 * cpu / args.requests, 4),
        "loop_cpu_ms_per_request": round(1000 * loop / args.requests, 4),
        "requests_per_s": round(args.requests / wall, 2),
        "server_cpu_share": round(cpu / wall, 3),
        "client_reads_per_request": round(run["reads"] / args.requests, 2),
        "failures": failures[:10],
        "failed": len(failures),
    }


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("uvicorn", "h11", "httptools", "uvloop", "httpx", "starlette", "fastapi"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args)
        return 0
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = set(protocols) - set(PROTOCOLS)
    if unknown:
        raise SystemExit(f"unknown protocols {sorted(unknown)}; known: {', '.join(PROTOCOLS)}")
    cpus = sorted(os.sched_getaffinity(0))
    args.server_cpu = cpus[0] if args.pin and len(cpus) > 1 else None
    if args.server_cpu is not None:
        os.sched_setaffinity(0, cpus[1:])
    samples = []
    for repeat in range(args.repeats):
        for protocol in protocols:
            sample = {"repeat": repeat, **measure(protocol, args)}
            samples.append(sample)
            print(
                f"  {repeat} {protocol:18s} {sample['cpu_ms_per_request']:7.3f} ms CPU/request "
                f"(loop {sample['loop_cpu_ms_per_request']:.3f}), "
                f"{sample['requests_per_s']:7.1f} requests/s, {sample['failed']} failed",
                flush=True,
            )
    summary = {}
    for protocol in protocols:
        mine = [s for s in samples if s["protocol"] == protocol]
        summary[protocol] = {
            key: statistics.median(s[key] for s in mine)
            for key in ("cpu_ms_per_request", "loop_cpu_ms_per_request", "requests_per_s")
        }
        summary[protocol]["failed"] = sum(s["failed"] for s in mine)
    report = {
        "bench": "http_overhead",
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loop": _loop_name() if args.loop == "auto" else args.loop,
            "server_cpu": args.server_cpu,
        },
        "versions": versions(),
        "settings": {
            "requests": args.requests,
            "warmup": args.warmup,
            "concurrency": args.concurrency,
            "repeats": args.repeats,
            "audio_s": args.audio_s,
            "chunk_frames": chunk_frames(args.audio_s, args.chunks),
            "chunk_interval_s": args.chunk_interval_s,
            "response_format": "pcm",
            "keep_alive": True,
        },
        "summary": summary,
        "samples": samples,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "http_overhead.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"\n{'protocol':18s} {'CPU ms/req':>10s} {'loop ms/req':>11s} {'req/s':>8s}  (medians)")
    for protocol, row in summary.items():
        print(
            f"{protocol:18s} {row['cpu_ms_per_request']:10.3f} "
            f"{row['loop_cpu_ms_per_request']:11.3f} {row['requests_per_s']:8.1f}"
        )
    return 1 if any(row["failed"] for row in summary.values()) else 0


def _cpu_model() -> str | None:
    from ttsfleet_runtime.loadtest.runner import cpu_model

    return cpu_model() or platform.processor() or None


def _loop_name() -> str:
    """Which event loop uvicorn's "auto" picks here (uvloop where it imports)."""
    try:
        import uvloop  # noqa: F401

        return "uvloop"
    except ImportError:
        return "asyncio"


if __name__ == "__main__":
    sys.exit(main())
