"""The chart's runtime PodMonitor, turned into the scrape config the Prometheus Operator
would generate (support.real_monitoring, which the real-node e2e tests scrape with), labels
and selects pods as the chart means: a real Prometheus relabels pods described as its
Kubernetes pod discovery describes them, and scrapes a metrics endpoint on loopback."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from support.polling import wait_for
from support.prometheus import Prometheus
from support.real_monitoring import (
    chart_runtime_pod_monitor,
    pod_monitor_scrape_configs,
    pod_targets,
)
from ttsfleet_operator import labels


@pytest.fixture(scope="module")
def metrics_port():
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = b"ttsfleet_queue_depth 3\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def pod(name: str, pod_labels: dict, port_name: str, port: int) -> dict:
    """A pod as the API returns it, Running on 127.0.0.1 (where the test's endpoint listens)."""
    return {
        "metadata": {"name": name, "namespace": "voice", "labels": pod_labels},
        "spec": {
            "nodeName": "node-0",
            "containers": [
                {"name": "runtime", "ports": [{"name": port_name, "containerPort": port}]}
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


RUNTIME_LABELS = {
    labels.NAME: labels.RUNTIME_APP,
    labels.MANAGED_BY: labels.MANAGER,
    labels.SERVICE: "voice-a",
    labels.TRACK: labels.CANARY,
    labels.POOL: labels.SPOT,
}


def test_runtime_pods_are_scraped_with_the_pod_monitors_labels_and_others_are_not(
    metrics_port, tmp_path
):
    pods = [
        pod("voice-a-canary-spot-0", RUNTIME_LABELS, "http", metrics_port),
        # Not the operator's: the selector leaves it out.
        pod(
            "someone-elses",
            {k: v for k, v in RUNTIME_LABELS.items() if k != labels.MANAGED_BY},
            "http",
            metrics_port,
        ),
        # The operator's, but not on the PodMonitor's port.
        pod("voice-a-other-port", RUNTIME_LABELS, "debug", metrics_port),
    ]
    targets = tmp_path / "pods.json"
    targets.write_text(json.dumps(pod_targets(pods)))
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": pod_monitor_scrape_configs(chart_runtime_pod_monitor(), targets, "1s"),
    }
    server = Prometheus(tmp_path, config)
    try:
        server.wait_ready()
        series = wait_for(
            lambda: server.query("ttsfleet_queue_depth"), 30, what="the runtime pod scraped"
        )
        # Two more scrapes: a pod the rules should drop would have shown up by now.
        wait_for(lambda: len(server.query("count_over_time(up[1m]) >= 3")) > 0, 30)
        series = server.query("ttsfleet_queue_depth")
    finally:
        server.stop()
    assert [s["metric"] for s in series] == [
        {
            "__name__": "ttsfleet_queue_depth",
            "job": "ttsfleet-runtime",
            "namespace": "voice",
            "pod": "voice-a-canary-spot-0",
            "container": "runtime",
            "endpoint": "http",
            "instance": f"127.0.0.1:{metrics_port}",
            "service": "voice-a",
            "track": labels.CANARY,
            "pool": labels.SPOT,
        }
    ]
