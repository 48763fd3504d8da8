"""A `ttsfleet serve` process for the server benchmarks (`bench capacity`,
`bench startup`): spawned with a checkpoint on this machine, waited for, stopped, its
log kept; and the head of their JSON reports (when, on what GPU, which versions).

The benchmark process itself never touches CUDA: the server does. Like the rest of the
load test, nothing here imports the server or the engine; `serve` runs in its own process.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .. import metrics
from .runner import environment


def gpu_description() -> dict:
    """The GPU as nvidia-smi names it (this process never touches CUDA: the server does)."""
    try:
        line = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.splitlines()[0]
        name, memory, driver = (part.strip() for part in line.split(","))
        return {"gpu": name, "gpu_memory": memory, "driver": driver}
    except Exception as exc:
        return {"gpu": None, "error": repr(exc)}


def report_head(benchmark: str, args) -> dict:
    """What a server benchmark's JSON starts with: when, on what, with which versions, how run."""
    return {
        "benchmark": benchmark,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **environment(),
        "gpu": gpu_description() if args.device != "cpu" else {"gpu": None},
        "server_versions": versions(),
        "command": " ".join(sys.argv),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "sizes": {},
    }


def report_saver(report: dict, path: Path, started: float):
    """A `save()` for a server benchmark: writes `report` to `path` with its wall time so
    far (seconds since the `time.monotonic()` reading `started`)."""

    def save() -> None:
        report["wall_s"] = round(time.monotonic() - started, 1)
        path.write_text(json.dumps(report, indent=1) + "\n")

    return save


def versions() -> dict:
    out = {}
    for name in ("torch", "triton", "fastapi", "uvicorn", "matplotlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def startup_phases(base: str) -> dict[str, float]:
    """ttsfleet_startup_seconds by phase, from the server's /metrics."""
    text = httpx.get(base + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name == metrics.STARTUP_SECONDS:
            return {s.labels["phase"]: round(s.value, 3) for s in family.samples}
    return {}


def wait_background(base: str, timeout_s: float) -> float | None:
    """Seconds the graphs left for after ready took (the server's own figure), or None
    (none are captured later, or they were not done within `timeout_s`)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        phases = startup_phases(base)
        if "capture_codec_graphs" not in phases:
            return None  # no CUDA graphs (a CPU server): nothing is captured later
        if "capture_background" in phases:
            return phases["capture_background"]
        time.sleep(0.5)
    return None


class Server:
    """`python3 -m ttsfleet_runtime.cli serve` in its own process, its log in --out."""

    def __init__(self, args, checkpoint: str, log_path: Path, max_batch: int, audio_s: float):
        self.base = f"http://127.0.0.1:{args.port}"
        self.log_path = log_path
        self.command = [
            sys.executable,
            "-m",
            "ttsfleet_runtime.cli",
            "serve",
            *("--model", checkpoint, "--device", args.device),
            *("--host", "127.0.0.1", "--port", str(args.port), "--auth", "disabled"),
            *("--max-audio-seconds", f"{audio_s:g}", "--max-batch", str(max_batch)),
            *args.serve_flag,
        ]
        self._log = open(log_path, "w")  # noqa: SIM115 (closed by stop())
        self.process = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT)

    def tail(self, lines: int = 25) -> str:
        return "".join(self.log_path.read_text(errors="replace").splitlines(True)[-lines:])

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> float:
        """Seconds until /health/ready answers 200; raises with the log's tail otherwise."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited {self.process.returncode}:\n{self.tail()}")
            try:
                if httpx.get(self.base + "/health/ready", timeout=2).status_code == 200:
                    return round(time.monotonic() - start, 2)
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
        raise TimeoutError(f"serve not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        self._log.close()
