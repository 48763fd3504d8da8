"""A real S3-compatible server for the tests: s3s-fs (hack/install-s3-server.sh builds it
once into the shared cache), over its own temporary directory, on a free loopback port,
checking every request's SigV4 signature against one key pair."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.polling import wait_for
from support.ports import free_port

REPO = Path(__file__).resolve().parents[2]
ACCESS_KEY = "cache-test-access"
SECRET_KEY = "cache-test-secret-5b1e"
BUCKET = "ttsfleet-cache-test"


def s3s_fs_binary() -> Path:
    """The binary, built now if no build made it yet (waits for one that is running)."""
    env = os.environ.get("TTSFLEET_CACHE") or str(Path.home() / ".cache" / "ttsfleet")
    versions = (REPO / "hack" / "versions.env").read_text()
    version = next(
        line.split("=", 1)[1].strip()
        for line in versions.splitlines()
        if line.startswith("S3S_FS_VERSION=")
    )
    binary = Path(env) / "s3s-fs" / version / "bin" / "s3s-fs"
    if not binary.exists():
        subprocess.run([str(REPO / "hack" / "install-s3-server.sh")], check=True)
    return binary


class S3Server:
    def __init__(self, workdir: Path):
        self.root = workdir / "data"
        self.root.mkdir()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "s3s-fs.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                str(s3s_fs_binary()),
                "--host", "127.0.0.1",
                "--port", str(self.port),
                "--access-key", ACCESS_KEY,
                "--secret-key", SECRET_KEY,
                str(self.root),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for(self._answers, 30, interval=0.05, what=f"s3s-fs on port {self.port}")

    def _answers(self) -> bool:
        import httpx

        if self.process.poll() is not None:
            raise RuntimeError(f"s3s-fs exited:\n{self.log_path.read_text()}")
        try:
            httpx.get(self.endpoint, timeout=1)
        except httpx.TransportError:
            return False
        return True

    def object_paths(self, bucket: str = BUCKET) -> list[Path]:
        """The stored objects' files (s3s-fs keeps one file per object under its root)."""
        base = self.root / bucket
        return [p for p in base.rglob("*") if p.is_file() and not p.name.startswith(".")]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self._log.close()
