"""A real `redis-server` (Debian's package, hack/install-tools.sh) for the tests:
its own temporary directory, a free loopback port, a password, no persistence."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support.polling import wait_for
from support.ports import free_port

PASSWORD = "redis-test-secret-7f3a"


class RedisServer:
    def __init__(self, workdir: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run hack/install-tools.sh")
        self.port = free_port()
        self.url = f"redis://:{PASSWORD}@127.0.0.1:{self.port}/0"
        self.log_path = workdir / "redis.log"
        self.process = subprocess.Popen(
            [
                binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(workdir),
                "--requirepass", PASSWORD,
                "--save", "",
                "--appendonly", "no",
                "--logfile", str(self.log_path),
            ],
        )  # fmt: skip
        wait_for(self._answers, 30, what=f"redis-server on port {self.port}")

    def client(self):
        import redis

        return redis.Redis.from_url(self.url)

    def _answers(self) -> bool:
        import redis

        if self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited:\n{self.log_path.read_text()}")
        try:
            return self.client().ping()
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
