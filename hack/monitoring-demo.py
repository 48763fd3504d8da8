#!/usr/bin/env python3
"""Make docs/dashboard-fleet.png: a tiny CPU runtime, a real Prometheus with our
rule files, a few minutes of changing load, then hack/render-dashboard.py.

    python hack/monitoring-demo.py --minutes 6 --out docs/dashboard-fleet.png

Needs `prometheus` on PATH (hack/install-tools.sh) and the runtime extra.
Load: 1 client, then 10 clients against --max-batch 4 (requests queue), then 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
RULES = sorted((REPO / "charts" / "ttsfleet" / "rules").glob("*.yaml"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(url)


def client(base: str, model: str, stop: threading.Event) -> None:
    with httpx.Client(base_url=base, timeout=120) as http:
        while not stop.is_set():
            body = {
                "model": model,
                "voice": "Vivian",
                "input": "Monitoring demo.",
                "response_format": "pcm",
                "stream_format": "audio",
            }
            http.post("/v1/audio/speech", json=body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=6)
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "docs" / "dashboard-fleet.png")
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="ttsfleet-demo-"))
    cli = [sys.executable, "-m", "ttsfleet_operator.cli"]
    subprocess.run(
        [
            *cli,
            "checkpoint",
            "--random",
            "--size",
            "tiny",
            "--variant",
            "CustomVoice",
            "--out",
            str(work / "tiny"),
        ],
        check=True,
        capture_output=True,
    )
    port, prom_port = free_port(), free_port()
    serve = subprocess.Popen(
        [
            *cli,
            "serve",
            "--model",
            str(work / "tiny"),
            "--device",
            "cpu",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--auth",
            "disabled",
            "--max-audio-seconds",
            "1.6",
            "--max-batch",
            "4",
            "--max-queue",
            "64",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    config = {
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(p) for p in RULES],
        "scrape_configs": [
            {
                "job_name": "ttsfleet-runtime",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{port}"],
                        "labels": {
                            "namespace": "voice",
                            "service": "demo",
                            "track": "stable",
                            "pool": "on-demand",
                            "pod": "demo-0",
                        },
                    }
                ],
            }
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={work}/prometheus.yml",
            f"--storage.tsdb.path={work}/data",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    stops: list[threading.Event] = []
    try:
        wait(base + "/health/ready", 300)
        wait(f"http://127.0.0.1:{prom_port}/-/ready", 60)
        model = httpx.get(base + "/v1/models").json()["data"][0]["id"]
        phase = args.minutes * 60 / 3
        for clients in (1, 10, 2):
            for stop in stops:
                stop.set()
            stops = [threading.Event() for _ in range(clients)]
            for stop in stops:
                threading.Thread(target=client, args=(base, model, stop), daemon=True).start()
            print(f"{clients} client(s) for {phase:.0f} s", flush=True)
            time.sleep(phase)
        spec = importlib.util.spec_from_file_location(
            "render_dashboard", REPO / "hack" / "render-dashboard.py"
        )
        render_dashboard = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(render_dashboard)
        data = render_dashboard.collect(
            f"http://127.0.0.1:{prom_port}", "voice", "demo", args.minutes, 4, "1m"
        )
        render_dashboard.render(data, args.out)
        print(f"wrote {args.out}")
    finally:
        for stop in stops:
            stop.set()
        serve.terminate()
        prometheus.terminate()
        serve.wait(timeout=60)
        prometheus.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
