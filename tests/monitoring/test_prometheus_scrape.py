"""A real Prometheus scrapes a real runtime (`ttsfleet serve`, the tiny random
checkpoint on CPU) with our rule files loaded, and the recorded series the
dashboards, alerts and HPA read come out with sane values.

No cluster is needed: a static scrape config gives the target the labels the
chart's runtime PodMonitor gives real pods (namespace, service, track, pool, pod).
"""

from __future__ import annotations

import importlib.util
import time

import pytest

from support.monitoring import REPO, RULE_FILES, rule_groups
from support.polling import wait_for
from support.prometheus import Prometheus
from support.runtime import RuntimeProcess, write_tiny_checkpoint
from support.traffic import SpeechTraffic

pytestmark = pytest.mark.slow

TARGET_LABELS = {
    "namespace": "voice",
    "service": "e2e",
    "track": "stable",
    "pool": "on-demand",
    "pod": "e2e-0",
}
SEL = 'namespace="voice", service="e2e", track="stable"'


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """`ttsfleet serve` on the tiny CPU checkpoint, as a separate process."""
    workdir = tmp_path_factory.mktemp("runtime")
    checkpoint = write_tiny_checkpoint(workdir / "tiny")
    # Every utterance runs to --max-audio-seconds (5 frames).
    process = RuntimeProcess(workdir, checkpoint, "--max-audio-seconds", "0.4", "--max-batch", "4")
    try:
        process.wait_ready(240)
        yield process.base, process.port
    finally:
        process.stop()


@pytest.fixture(scope="module")
def prometheus(runtime, tmp_path_factory):
    _, port = runtime
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "ttsfleet-runtime",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": TARGET_LABELS}],
            }
        ],
    }
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), config, RULE_FILES)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def value(result: list[dict]) -> float:
    (sample,) = result
    return float(sample["value"][1])


def test_recording_rules_produce_the_series_dashboards_alerts_and_hpa_read(
    runtime, prometheus, tmp_path
):
    base, _ = runtime
    # Streamed and whole-file requests plus ones the client gets wrong, so counters move across scrapes.
    with SpeechTraffic(base, varied=True) as traffic:
        # Every recorded series needs a counter to move between two scrapes.
        wait_for(
            lambda: (
                prometheus.query(
                    f"namespace_service_track:ttsfleet_speech_requests:rate1m{{{SEL}}} > 0"
                )
                and prometheus.query(
                    f"namespace_service_track:ttsfleet_server_error_ratio:rate5m{{{SEL}}}"
                )
                and len(
                    prometheus.query(
                        f"namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m{{{SEL}}}"
                        " >= 0"
                    )
                )
                == 3
            ),
            120,
            what="the recorded series",
        )
        time.sleep(3)  # a few more evaluations with traffic flowing
    assert traffic.failures == []
    assert traffic.sent["ok"] >= 3 and traffic.sent["invalid"] >= 1

    # Latency: three quantiles, ordered, finite and within the histogram's range.
    ttfa = {
        s["metric"]["quantile"]: float(s["value"][1])
        for s in prometheus.query_one_evaluation(
            f"namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m{{{SEL}}}"
        )
    }
    assert set(ttfa) == {"0.5", "0.95", "0.99"}
    assert 0 < ttfa["0.5"] <= ttfa["0.95"] <= ttfa["0.99"] <= 10, ttfa
    rtf = {
        s["metric"]["quantile"]: float(s["value"][1])
        for s in prometheus.query_one_evaluation(
            f"namespace_service_track:ttsfleet_real_time_factor:histogram_quantile5m{{{SEL}}}"
        )
    }
    assert set(rtf) == {"0.5", "0.95"} and 0 < rtf["0.5"] <= rtf["0.95"], rtf

    # Traffic: speech requests and audio flowed; client errors happened...
    assert (
        value(prometheus.query(f"namespace_service_track:ttsfleet_audio_seconds:rate1m{{{SEL}}}"))
        > 0
    )
    assert (
        value(prometheus.query(f'sum(ttsfleet_errors_total{{{SEL}, type="invalid_request"}})')) >= 1
    )
    # ...and none is the server's fault: the ratio is exactly 0, present, not absent.
    assert (
        value(
            prometheus.query(f"namespace_service_track:ttsfleet_server_error_ratio:rate5m{{{SEL}}}")
        )
        == 0
    )

    # Capacity: the pod counts as one ready on-demand pod; the HPA's per-pod
    # queue depth has the labels prometheus-adapter maps to the pod.
    assert (
        value(
            prometheus.query(
                'namespace_service_pool:ttsfleet_ready_pods:sum{namespace="voice", service="e2e", pool="on-demand"}'
            )
        )
        == 1
    )
    (queue,) = prometheus.query('ttsfleet_queue_depth{service="e2e"}')
    assert queue["metric"]["namespace"] == "voice" and queue["metric"]["pod"] == "e2e-0"
    assert (
        value(prometheus.query(f"namespace_service_track:ttsfleet_queue_depth:avg{{{SEL}}}")) >= 0
    )

    # Every rule evaluated without error on real data (no many-to-many matches).
    status, body = prometheus.api("rules")
    rules = [rule for group in body["data"]["groups"] for rule in group["rules"]]
    assert status == 200 and len(rules) == sum(len(group["rules"]) for group in rule_groups())
    assert [r["name"] for r in rules if r["health"] != "ok"] == []

    # Target-down alerts: the scraped runtime is up with the labels they group by; no
    # operator is scraped here, so its absent() branch is already counting.
    (up,) = prometheus.query('up{job="ttsfleet-runtime"}')
    assert up["metric"].items() >= TARGET_LABELS.items() and up["value"][1] == "1"
    state = {r["name"]: r["state"] for r in rules if r["type"] == "alerting"}
    assert state["TTSFleetRuntimeTargetDown"] == "inactive"
    assert state["TTSFleetOperatorDown"] == "pending"

    # The picture: the dashboard's own panels, rendered from this Prometheus.
    spec = importlib.util.spec_from_file_location(
        "render_dashboard", REPO / "hack" / "render-dashboard.py"
    )
    render_dashboard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render_dashboard)
    data = render_dashboard.collect(
        prometheus.url, "voice", "e2e", minutes=2, step=1, rate_interval="1m"
    )
    ttfa_panel = data["panels"][0]
    assert ttfa_panel["title"] == "Time to first audio"
    assert {s["name"] for s in ttfa_panel["series"]} >= {
        "e2e stable p0.5",
        "e2e stable p0.95",
        "e2e stable p0.99",
    }
    png = render_dashboard.render(data, tmp_path / "panel.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
