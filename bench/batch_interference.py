#!/usr/bin/env python3
"""Does a batch job delay interactive streams? One server, interactive Poisson arrivals at
--rate over HTTP for --duration-s, twice: alone, then while a batch of --items runs on the
same server's batch worker (docs/batch.md). Reports interactive TTFA p50/p95 both ways and
the batch's throughput in audio-s/s while the interactive load ran.

The batch worker needs a Redis and an S3 bucket: the script starts `redis-server` and
s3s-fs from the binaries given (the device machine has neither installed; carry them:
redis-server from Debian's package, s3s-fs from hack/install-s3-server.sh's build).
Writes into --out: batch_interference.json (machine, versions, command, both phases'
summaries, the batch's counts and throughput), samples.json.gz (every interactive
request's raw timings, both phases) and the logs. Random weights never stop: every
utterance, interactive or batch, is --audio-s long.

On the CPU, tiny (a check that it runs, ~2 min):
    PYTHONPATH=runtime python3 bench/batch_interference.py --out /tmp/bi --size tiny \\
        --device cpu --rate 0.5 --duration-s 20 --items 12 --audio-s 1 --max-batch 4 \\
        --batch-concurrency 2
On an H200 (1.7B):
    PYTHONPATH=runtime python3 bench/batch_interference.py --out $OUT --size 1.7B \\
        --rate 20 --duration-s 60 --items 20000 --audio-s 4 --max-batch 128 \\
        --batch-concurrency 96 --redis-server ./redis-server --s3s-fs ./s3s-fs
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ACCESS_KEY = "bench-access"
SECRET_KEY = secrets.token_hex(16)
BUCKET = "ttsfleet-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.2)


class Stores:
    """redis-server and s3s-fs, each on a free loopback port, their logs in `folder`, the
    bucket's objects (GBs of batch audio) in a temporary folder removed at the end."""

    def __init__(self, redis_binary: str, s3_binary: str, folder: Path):
        self.data = tempfile.TemporaryDirectory(prefix="batch-bench-s3-")
        password = secrets.token_hex(12)
        redis_port, s3_port = free_port(), free_port()
        self.redis_url = f"redis://:{password}@127.0.0.1:{redis_port}/0"
        self.s3_endpoint = f"http://127.0.0.1:{s3_port}"
        self.logs = [open(folder / "redis.log", "w"), open(folder / "s3s-fs.log", "w")]  # noqa: SIM115
        self.processes = [
            subprocess.Popen(
                [redis_binary, "--port", str(redis_port), "--bind", "127.0.0.1",
                 "--requirepass", password, "--save", "", "--appendonly", "no"],
                stdout=self.logs[0], stderr=subprocess.STDOUT,
            ),
            subprocess.Popen(
                [s3_binary, "--host", "127.0.0.1", "--port", str(s3_port),
                 "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, self.data.name],
                stdout=self.logs[1], stderr=subprocess.STDOUT,
            ),
        ]  # fmt: skip
        wait_until(lambda: self._answers(redis_port, s3_port), 30, "redis-server and s3s-fs")
        from ttsfleet_runtime.server.response_cache.s3_client import S3Client

        async def create_bucket():
            client = S3Client(self.s3_endpoint, BUCKET, ACCESS_KEY, SECRET_KEY)
            await client.create_bucket()
            await client.close()

        asyncio.run(create_bucket())

    def _answers(self, *ports: int) -> bool:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[0]} exited {process.returncode}")
        for port in ports:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
        return True

    def environment(self) -> dict[str, str]:
        return {
            "TTSFLEET_RESPONSE_CACHE_REDIS_URL": self.redis_url,
            "TTSFLEET_RESPONSE_CACHE_S3_ACCESS_KEY": ACCESS_KEY,
            "TTSFLEET_RESPONSE_CACHE_S3_SECRET_KEY": SECRET_KEY,
        }

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(timeout=10)
        for log in self.logs:
            log.close()
        self.data.cleanup()


def submit_batch(base: str, model: str, voice: str, items: int, texts: list[str]) -> str:
    lines = [
        json.dumps({
            "custom_id": f"item-{i}", "method": "POST", "url": "/v1/audio/speech",
            "body": {"model": model, "voice": voice, "input": texts[i % len(texts)],
                     "response_format": "wav"},
        })
        for i in range(items)
    ]  # fmt: skip
    data = ("\n".join(lines) + "\n").encode()
    uploaded = httpx.post(
        base + "/v1/files",
        files={"file": ("batch.jsonl", data, "application/jsonl")},
        data={"purpose": "batch"},
        timeout=120,
    )
    uploaded.raise_for_status()
    created = httpx.post(
        base + "/v1/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/audio/speech",
            "completion_window": "24h",
        },
        timeout=120,
    )
    created.raise_for_status()
    return created.json()["id"]


def batch_state(base: str, batch_id: str) -> dict:
    return httpx.get(f"{base}/v1/batches/{batch_id}", timeout=30).json()


def interactive_phase(base: str, args, texts: list[str], label: str) -> dict:
    from ttsfleet_runtime.loadtest.runner import LoadConfig, run_load

    config = LoadConfig(
        url=base,
        texts=texts,
        rates=[args.rate],
        duration_s=args.duration_s,
        seed=args.seed,
        stop_after=0,
        timeout_s=120.0,
        progress=lambda line: print(label, json.dumps(line), flush=True),
    )
    return asyncio.run(run_load(config))


def phase_summary(result: dict) -> dict:
    rate = result["rates"][0]
    return {
        "requests": rate["requests"],
        "ttfa_ms": rate["ttfa_ms"],
        "underrun_share": rate.get("underrun_share"),
        "share": rate.get("share"),
        "interactive_audio_s_per_s": rate.get("audio_s_per_s"),
        "wall_s": result["wall_s"],
        # The server's own view over the phase: the engine and codec threads' busy
        # shares per phase (where a batch's cost lands), active streams, queue depth.
        "server": rate.get("server"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", default="1.7B", help="random checkpoint size: tiny, 0.6B, 1.7B")
    ap.add_argument("--model", default=None, help="an existing checkpoint instead")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rate", type=float, default=20.0, help="interactive arrivals per second")
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument(
        "--items", type=int, default=20_000, help="batch items (enough to outlast the load)"
    )
    ap.add_argument("--audio-s", type=float, default=4.0, help="seconds of audio per utterance")
    ap.add_argument("--max-batch", type=int, default=128)
    ap.add_argument("--batch-concurrency", type=int, default=96)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=0, help="0: a free one")
    ap.add_argument("--redis-server", default=shutil.which("redis-server"))
    ap.add_argument(
        "--s3s-fs", default=None, help="default: the build hack/install-s3-server.sh makes"
    )
    ap.add_argument("--serve-flag", action="append", default=[], help="one more `serve` argument")
    args = ap.parse_args()
    if args.s3s_fs is None:
        cache = Path(os.environ.get("TTSFLEET_CACHE") or Path.home() / ".cache" / "ttsfleet")
        found = sorted(cache.glob("s3s-fs/*/bin/s3s-fs"))
        args.s3s_fs = str(found[-1]) if found else None
    if not args.redis_server or not args.s3s_fs:
        ap.error("give --redis-server and --s3s-fs: the batch worker keeps its state there")
    args.port = args.port or free_port()
    args.out.mkdir(parents=True, exist_ok=True)

    from ttsfleet_runtime.bench.common import ready_checkpoint
    from ttsfleet_runtime.loadtest.serve_process import (
        Server,
        report_head,
        report_saver,
        wait_background,
    )
    from ttsfleet_runtime.loadtest.texts import builtin_texts

    report = report_head("batch_interference", args)
    report["versions_ttsfleet"] = _ttsfleet_version()
    started = time.monotonic()
    save = report_saver(report, args.out / "batch_interference.json", started)
    checkpoint = ready_checkpoint(args.size, args)
    stores = Stores(args.redis_server, args.s3s_fs, args.out)
    os.environ.update(stores.environment())
    args.serve_flag = [
        *args.serve_flag,
        *("--batch-api", "on", "--batch-worker-concurrency", str(args.batch_concurrency)),
        *("--response-cache-s3-endpoint", stores.s3_endpoint),
        *("--response-cache-s3-bucket", BUCKET),
    ]
    server = Server(args, checkpoint, args.out / "serve.log", args.max_batch, args.audio_s)
    texts = builtin_texts(args.audio_s)
    samples = {}
    try:
        report["ready_s"] = server.wait_ready(600)
        # The graphs captured after ready stall steps while they are made: both phases
        # start once they are done (the H200's first "alone" phase, started at ready,
        # had p95 812 ms from its first 10 s).
        report["capture_background_s"] = wait_background(server.base, 120.0)
        alone = interactive_phase(server.base, args, texts, "alone")
        samples["alone"] = alone.pop("samples")
        report["alone"] = phase_summary(alone)
        save()

        model = alone["server"]["model"]
        batch_id = submit_batch(server.base, model, alone["server"]["voice"], args.items, texts)
        # The batch fills its share of the engine before the interactive load starts.
        wait_until(
            lambda: batch_state(server.base, batch_id)["request_counts"]["completed"] > 0,
            600,
            "the batch's first item",
        )
        before = batch_state(server.base, batch_id)["request_counts"]["completed"]
        t0 = time.monotonic()
        loaded = interactive_phase(server.base, args, texts, "with-batch")
        elapsed = time.monotonic() - t0
        state = batch_state(server.base, batch_id)
        done = state["request_counts"]["completed"] - before
        samples["with_batch"] = loaded.pop("samples")
        report["with_batch"] = phase_summary(loaded)
        report["batch"] = {
            "items": args.items,
            "concurrency": args.batch_concurrency,
            "completed_during_load": done,
            "load_window_s": round(elapsed, 2),
            "audio_s_per_s_during_load": round(done * args.audio_s / elapsed, 2),
            "status_after_load": state["status"],
            "note": "completed counts items recorded in the window (each --audio-s long); "
            "items running at its edges are not counted",
        }
        httpx.post(f"{server.base}/v1/batches/{batch_id}/cancel", timeout=30)
        report["ttfa_p95_ms"] = {
            "alone": report["alone"]["ttfa_ms"]["p95"],
            "with_batch": report["with_batch"]["ttfa_ms"]["p95"],
        }
    finally:
        server.stop()
        stores.stop()
        with gzip.open(args.out / "samples.json.gz", "wt") as out:
            json.dump(samples, out)
        save()
    print(json.dumps({k: report.get(k) for k in ("alone", "with_batch", "batch")}, indent=1))
    return 0


def _ttsfleet_version() -> str | None:
    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
