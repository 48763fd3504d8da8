"""The canary analysis: its PromQL run by Prometheus's own engine (promtool test rules, on
input series labelled as the chart's PodMonitor labels them), its verdicts, and the HTTP
client against a real Prometheus server."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess

import pytest
import yaml

from support.tools import tool
from ttsfleet_operator.canary import analysis
from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.canary.prometheus import Prometheus, PrometheusError
from ttsfleet_operator.tts_service import CanaryAnalysis


def series(name: str, values: str, **labels: str) -> dict:
    base = {
        "namespace": "voice",
        "service": "demo",
        "track": "canary",
        "pool": "on-demand",
        "pod": "demo-c-0",
    }
    text = ",".join(f'{k}="{v}"' for k, v in {**base, **labels}.items())
    return {"series": f"{name}{{{text}}}", "values": values}


# Per minute on the canary: 60 API requests, 3 server-fault errors, 50 client errors (not counted),
# first audio for 30 under 0.1 s and 30 between 0.1 and 0.2 s. Noise that must not count: the
# stable track, /metrics scrapes, another service.
INPUT = [
    series("ttsfleet_requests_total", "0+57x20", route="/v1/audio/speech", code="200"),
    series("ttsfleet_requests_total", "0+3x20", route="/v1/audio/speech", code="500"),
    series("ttsfleet_requests_total", "0+1000x20", route="/metrics", code="200"),
    series(
        "ttsfleet_requests_total", "0+600x20", route="/v1/audio/speech", code="200", track="stable"
    ),
    series(
        "ttsfleet_requests_total", "0+600x20", route="/v1/audio/speech", code="200", service="other"
    ),
    series("ttsfleet_errors_total", "0+3x20", type="internal"),
    series("ttsfleet_errors_total", "0+50x20", type="invalid_request"),
    series("ttsfleet_errors_total", "0+60x20", type="internal", track="stable"),
    series("ttsfleet_time_to_first_audio_seconds_bucket", "0+30x20", le="0.1"),
    series("ttsfleet_time_to_first_audio_seconds_bucket", "0+60x20", le="0.2"),
    series("ttsfleet_time_to_first_audio_seconds_bucket", "0+60x20", le="+Inf"),
    series("ttsfleet_time_to_first_audio_seconds_bucket", "0+60x20", le="0.1", track="stable"),
    series("ttsfleet_time_to_first_audio_seconds_bucket", "0+60x20", le="+Inf", track="stable"),
]
# Over a 120 s window ending at 10 m: 120 requests, 6 errors; p95 of the TTFA histogram:
# rank 57 of 60 falls in (0.1, 0.2] holding ranks 31..60: 0.1 + 0.1 * 27/30.
EXPECTED = {"requests": 120, "error_ratio": 0.05, "ttfa_p95": 0.19}


def promtool_test(
    tmp_path: pathlib.Path, input_series: list[dict], expected: dict[str, list[dict]]
) -> None:
    """promtool evaluates each query at 10 m over `input_series`: expected = {query: samples}."""
    tests = [
        {
            "interval": "1m",
            "input_series": input_series,
            "promql_expr_test": [
                {"expr": expr, "eval_time": "10m", "exp_samples": samples}
                for expr, samples in expected.items()
            ],
        }
    ]
    path = tmp_path / "analysis_test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": tests}))
    result = subprocess.run(
        [tool("promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_queries_give_requests_error_ratio_and_ttfa_of_the_canary_only(tmp_path):
    queries = analysis.queries("voice", "demo", 120)
    promtool_test(
        tmp_path,
        INPUT,
        {queries[name]: [{"labels": "{}", "value": value}] for name, value in EXPECTED.items()},
    )


def test_no_error_series_reads_as_zero_errors_not_as_no_data(tmp_path):
    queries = analysis.queries("voice", "demo", 120)
    quiet = [s for s in INPUT if "errors_total" not in s["series"]]
    promtool_test(tmp_path, quiet, {queries["error_ratio"]: [{"labels": "{}", "value": 0}]})


def test_a_canary_without_traffic_has_no_request_samples(tmp_path):
    queries = analysis.queries("voice", "idle", 120)
    promtool_test(tmp_path, INPUT, {queries[name]: [] for name in ("requests", "ttfa_p95")})


RULES = CanaryAnalysis(minRequests=50, maxErrorRatio=0.01, ttfaP95Milliseconds=200)


@pytest.mark.parametrize(
    ("requests", "error_ratio", "ttfa", "verdict", "says"),
    [
        (None, None, None, sm.INCONCLUSIVE, "0 requests on the canary, 50 needed"),
        (49, 0.0, 0.05, sm.INCONCLUSIVE, "49 requests"),
        (49, 0.9, 9.0, sm.INCONCLUSIVE, "49 requests"),  # too few to blame the candidate either
        (120, 0.0, 0.19, sm.PASS, "120 requests"),
        (120, 0.05, 0.19, sm.FAIL, "error ratio 0.050 > 0.01"),
        (120, 0.0, 0.25, sm.FAIL, "TTFA p95 250 ms > 200 ms"),
        (120, None, 0.1, sm.PASS, "error ratio n/a"),
        (120, 0.0, None, sm.INCONCLUSIVE, "no TTFA observations"),
    ],
)
def test_verdicts(requests, error_ratio, ttfa, verdict, says):
    result = analysis.judge(RULES, requests, error_ratio, ttfa)
    assert result.result == verdict and says in result.reason


def test_without_prometheus_every_interval_is_inconclusive():
    result = asyncio.run(analysis.analyse(None, "voice", "demo", RULES))
    assert result.result == sm.INCONCLUSIVE and "--prometheus-url" in result.reason


def test_an_unreachable_prometheus_is_inconclusive_not_a_failure():
    client = Prometheus("http://127.0.0.1:9", timeout=2)
    result = asyncio.run(analysis.analyse(client, "voice", "demo", RULES))
    assert result.result == sm.INCONCLUSIVE and "Prometheus query failed" in result.reason


def test_the_client_reads_vectors_and_scalars_from_a_real_prometheus(bare_prometheus):
    client = Prometheus(bare_prometheus.url)
    assert asyncio.run(client.query('label_replace(vector(3), "a", "b", "", "")')) == [
        ({"a": "b"}, 3.0)
    ]
    assert client.query_sync("scalar(vector(2))") == [({}, 2.0)]
    assert client.query_sync("vector(0) / 0 > 1") == []
    assert client.query_sync("nonexistent_metric") == []


def test_the_client_reports_promql_errors(bare_prometheus):
    with pytest.raises(PrometheusError, match="HTTP 400"):
        Prometheus(bare_prometheus.url).query_sync("sum(")
