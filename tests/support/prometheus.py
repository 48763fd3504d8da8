"""A real Prometheus server on loopback (the binary `make tools` installs)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from support.polling import wait_for
from support.ports import free_port
from support.tools import tool


class Prometheus:
    """A real Prometheus server on loopback, with its own config and storage."""

    def __init__(self, workdir: Path, config: dict, rule_files: list[Path] = ()):
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {**config, "rule_files": [str(p) for p in rule_files]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 (open while the process runs; stop() closes it)
        self.process = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError("prometheus exited:\n" + self.log_path.read_text())
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 60) -> None:
        wait_for(self.ready, timeout, interval=0.2, what="prometheus to be ready")

    def api(self, path: str, **params) -> tuple[int, dict]:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr} if at is None else {"query": expr, "time": at}
        status, body = self.api("query", **params)
        assert status == 200, body
        return body["data"]["result"]

    def query_one_evaluation(self, expr: str) -> list[dict]:
        """The series of `expr` as one rule evaluation wrote them.

        Prometheus commits each recording rule's output on its own, so a plain
        query can read one series from the group's newest evaluation and its
        siblings from the one before (a p95 above the p99). Reading at the
        oldest of their latest timestamps sees every series at that evaluation.
        """
        stamps = self.query(f"timestamp({expr})")
        assert stamps, f"no series for {expr}"
        return self.query(expr, at=min(float(s["value"][1]) for s in stamps))

    def stop(self) -> None:
        stop_process(self.process, self.log)


def stop_process(process: subprocess.Popen, log) -> None:
    """SIGTERM, SIGKILL after 20 s; then the process's log file is closed."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    log.close()
