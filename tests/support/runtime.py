"""The runtime as a pod runs it: `ttsfleet serve` in its own process, on a tiny random
checkpoint on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from support.polling import wait_for
from support.ports import free_port


def ttsfleet(*args: str) -> list[str]:
    """The `ttsfleet` command line, run by this Python (the venv's, whatever PATH says)."""
    return [sys.executable, "-m", "ttsfleet_operator.cli", *args]


def write_tiny_checkpoint(out: Path, variant: str = "CustomVoice") -> Path:
    """`ttsfleet checkpoint --random --size tiny` into `out` (random weights, no download)."""
    subprocess.run(
        ttsfleet(
            "checkpoint", "--random", "--size", "tiny", "--variant", variant, "--out", str(out)
        ),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


class RuntimeProcess:
    """`ttsfleet serve --model checkpoint` on CPU on a free loopback port, with auth off;
    `flags` are further serve options, `env` further variables. Its output goes to
    `<workdir>/<name>.log`. With `checkpoint=None` the process serves the stand-in
    engine's Base variant instead (support/stand_in_serve.py).

    Random weights never say EOS: every utterance runs to --max-audio-seconds.
    """

    def __init__(
        self,
        workdir: Path,
        checkpoint: Path | None,
        *flags: str,
        name: str = "serve",
        log_level: str = "warning",
        env: dict[str, str] | None = None,
    ):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{name}.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 (open while the process runs; stop() closes it)
        if checkpoint is None:
            tests_dir = str(Path(__file__).resolve().parents[1])
            program = [sys.executable, "-m", "support.stand_in_serve", "--model", "stand-in"]
            path = os.pathsep.join(p for p in (tests_dir, os.environ.get("PYTHONPATH")) if p)
            env = {"PYTHONPATH": path, **(env or {})}
        else:
            program = ttsfleet("serve", "--model", str(checkpoint))
        self.process = subprocess.Popen(
            [
                *program,
                "--device",
                "cpu",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--auth",
                "disabled",
                *flags,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TTSFLEET_LOG_LEVEL": log_level, **(env or {})},
        )

    def log_text(self) -> str:
        return self.log_path.read_text()

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"ttsfleet serve exited:\n{self.log_text()}")
        try:
            return httpx.get(self.base + "/health/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 240) -> RuntimeProcess:
        wait_for(self.ready, timeout, what=f"ttsfleet serve on port {self.port} to be ready")
        return self

    def stop(self) -> None:
        """SIGTERM (the server drains), SIGKILL if it has not exited after 30 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(timeout=10)
        self.log.close()
