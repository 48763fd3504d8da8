"""Health for the kubelet, metrics for Prometheus (names the HPA and canary read),
JSON log lines carrying request ids."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.live_server import auth
from ttsfleet_runtime import metrics
from ttsfleet_runtime.server.json_logging import JsonFormatter


def families(base_url) -> dict:
    return {
        f.name: f for f in text_string_to_metric_families(httpx.get(base_url + "/metrics").text)
    }


def test_a_finished_request_shows_up_in_every_latency_and_volume_metric(server, model_id):
    before = families(server.base_url)
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        json={
            "model": model_id,
            "input": "Count me",
            "voice": "Vivian",
            "response_format": "pcm",
            "stream_format": "audio",
        },
        headers=auth(),
    )
    assert response.status_code == 200
    after = families(server.base_url)

    def count(fams, name, suffix="_count"):
        return (
            next((s.value for s in fams[name].samples if s.name == name + suffix), 0.0)
            if name in fams
            else 0.0
        )

    for name in (metrics.TIME_TO_FIRST_AUDIO, metrics.REQUEST_DURATION, metrics.REAL_TIME_FACTOR):
        assert count(after, name) == count(before, name) + 1, name
    audio = "ttsfleet_audio_seconds"
    sent_s = count(after, audio, "_total") - count(before, audio, "_total")
    assert sent_s == pytest.approx(len(response.content) / 2 / 24000)
    assert count(after, "ttsfleet_frames", "_total") > count(before, "ttsfleet_frames", "_total")


def test_the_contract_names_are_exported(server):
    names = set()
    for family in families(server.base_url).values():
        names |= {s.name for s in family.samples}
    for name in (
        metrics.QUEUE_DEPTH,
        metrics.ACTIVE_STREAMS,
        metrics.READY,
        metrics.KV_CACHE_USED,
        metrics.KV_CACHE_TOTAL,
        metrics.BUILD_INFO,
        metrics.REQUESTS,
        metrics.TIME_TO_FIRST_AUDIO + "_bucket",
    ):
        assert name in names, name


def test_build_info_names_the_model(server):
    build = families(server.base_url)["ttsfleet_build_info"].samples[0]
    assert build.labels["model"] == server.engine.info.name
    assert build.labels["variant"] == "CustomVoice"


def test_scrapes_do_not_count_themselves(server):
    for _ in range(3):
        httpx.get(server.base_url + "/metrics")
    samples = [
        s
        for f in families(server.base_url).values()
        for s in f.samples
        if s.name == metrics.REQUESTS
    ]
    assert not [s for s in samples if s.labels["route"] == "/metrics"]


def test_unknown_paths_share_one_label(server):
    httpx.get(server.base_url + "/no/such/path/123")
    samples = [
        s
        for f in families(server.base_url).values()
        for s in f.samples
        if s.name == metrics.REQUESTS
    ]
    assert {"route": "unmatched", "code": "404"} in [s.labels for s in samples]
    assert not [s for s in samples if "123" in s.labels["route"]]


def test_log_lines_are_json_with_the_extra_fields():
    record = logging.LogRecord("ttsfleet.access", logging.INFO, __file__, 1, "request", (), None)
    record.request_id = "req_abc"
    record.status = 200
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "request" and line["request_id"] == "req_abc" and line["status"] == 200
    assert line["level"] == "info" and line["ts"].endswith("+00:00")


def test_the_start_up_phases_are_exported_once_ready(server):
    family = families(server.base_url)[metrics.STARTUP_SECONDS]
    seconds = {s.labels["phase"]: s.value for s in family.samples}
    assert set(seconds) >= {"import", "load_weights", "total"}
    assert set(seconds) <= set(metrics.STARTUP_PHASES)
    steps = sum(v for phase, v in seconds.items() if phase != "total")
    # The phases follow each other from process start; "total" ends at ready.
    assert steps <= seconds["total"] <= steps + 1.0
