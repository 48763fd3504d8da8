"""The prometheus-adapter rules the chart ships: they render behind their flag, expose exactly
the metric names the HPA asks for, and their queries, expanded as the adapter expands them,
give per-pod values when Prometheus's own engine runs them (promtool) over PodMonitor-labelled
series and the chart's recording rules."""

from __future__ import annotations

import pathlib
import subprocess

import yaml

from support.tools import tool
from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.tts_service import TTSService

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ttsfleet"
RULES_FILE = CHART / "adapter" / "rules.yaml"


def helm_template(*sets: str) -> subprocess.CompletedProcess:
    args = [tool("helm"), "template", "ttsfleet", str(CHART), "--namespace", "ttsfleet-system"]
    for value in sets:
        args += ["--set", value]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def adapter_rules() -> list[dict]:
    return yaml.safe_load(RULES_FILE.read_text())["rules"]


def expand(query: str, series: str, matchers: str, group_by: str) -> str:
    """What prometheus-adapter does to a metricsQuery before it runs it."""
    for placeholder, value in (
        ("<<.Series>>", series),
        ("<<.LabelMatchers>>", matchers),
        ("<<.GroupBy>>", group_by),
    ):
        query = query.replace(placeholder, value)
    return query


def test_off_by_default():
    result = helm_template()
    assert result.returncode == 0, result.stderr
    assert "adapter-rules" not in result.stdout


def test_rendered_configmap_holds_the_rules_file_under_config_yaml():
    result = helm_template(
        "autoscaling.prometheusAdapterRules.enabled=true", "monitoring.rules.enabled=true"
    )
    assert result.returncode == 0, result.stderr
    (configmap,) = [
        m
        for m in yaml.safe_load_all(result.stdout)
        if m and m["metadata"]["name"] == "ttsfleet-adapter-rules"
    ]
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == yaml.safe_load(
        RULES_FILE.read_text()
    )


def test_refused_without_the_recording_rules_the_gpu_rule_reads():
    result = helm_template("autoscaling.prometheusAdapterRules.enabled=true")
    assert result.returncode != 0 and "needs monitoring.rules.enabled" in result.stderr


def test_the_adapter_serves_exactly_the_pods_metrics_the_hpa_asks_for():
    service = TTSService.model_validate(
        {
            "metadata": {"name": "demo", "namespace": "voice"},
            "spec": {
                "model": {"size": "0.6B", "variant": "Base"},
                "autoscaling": {"enabled": True},
            },
        }
    )
    (hpa,) = [m for m in render_fleet(service) if m["kind"] == "HorizontalPodAutoscaler"]
    asked = {metric["pods"]["metric"]["name"] for metric in hpa["spec"]["metrics"]}
    served = {rule["name"]["as"] for rule in adapter_rules()}
    assert served == asked
    for rule in adapter_rules():
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }


def series(name: str, pod: str, value: str, **extra: str) -> dict:
    labels = {
        "namespace": "voice",
        "service": "demo",
        "track": "stable",
        "pool": "on-demand",
        "pod": pod,
        **extra,
    }
    return {
        "series": name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}",
        "values": value,
    }


def test_the_queries_give_per_pod_values_nvml_first_then_dcgm(tmp_path):
    # demo-a reports NVML itself; demo-b has no NVML reading, only DCGM exporter's percent
    # (its own namespace/pod labels, honorLabels) joined through build_info.
    inputs = [
        series("ttsfleet_queue_depth", "demo-a", "3x10"),
        series("ttsfleet_queue_depth", "demo-b", "7x10"),
        series("ttsfleet_queue_depth", "other-0", "100x10", namespace="elsewhere"),
        series("ttsfleet_gpu_utilization_ratio", "demo-a", "0.5x10", gpu="0"),
        {
            "series": 'DCGM_FI_DEV_GPU_UTIL{namespace="voice",pod="demo-b",gpu="0"}',
            "values": "80x10",
        },
        series(
            "ttsfleet_build_info",
            "demo-a",
            "1x10",
            version="0",
            model="m",
            variant="Base",
            size="0.6B",
        ),
        series(
            "ttsfleet_build_info",
            "demo-b",
            "1x10",
            version="0",
            model="m",
            variant="Base",
            size="0.6B",
        ),
    ]
    matchers = 'namespace="voice",pod=~"demo-a|demo-b"'
    tests = []
    for rule in adapter_rules():
        name = rule["seriesQuery"].split("{")[0]
        tests.append(
            {
                "expr": expand(rule["metricsQuery"], name, matchers, "pod"),
                "eval_time": "5m",
                "exp_samples": [
                    {
                        "labels": '{pod="demo-a"}',
                        "value": {"ttsfleet_queue_depth": 3}.get(rule["name"]["as"], 0.5),
                    },
                    {
                        "labels": '{pod="demo-b"}',
                        "value": {"ttsfleet_queue_depth": 7}.get(rule["name"]["as"], 0.8),
                    },
                ],
            }
        )
        # The series query the adapter lists metrics with finds the series.
        tests.append(
            {
                "expr": f"count({rule['seriesQuery']}) > 0",
                "eval_time": "5m",
                "exp_samples": [{"labels": "{}", "value": 3 if "queue" in name else 2}],
            }
        )
    test_file = tmp_path / "adapter_test.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(CHART / "rules" / "ttsfleet-recording.yaml")],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": tests}],
            }
        )
    )
    result = subprocess.run(
        [tool("promtool"), "test", "rules", str(test_file)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
