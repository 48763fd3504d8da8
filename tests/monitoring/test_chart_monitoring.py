"""The chart's monitoring objects: off by default, and with the flags on,
dashboards, PrometheusRules and PodMonitors that match the operator and the
runtime pods it renders.

PodMonitor and PrometheusRule are Prometheus Operator CRDs that
kubernetes-validate has no schema for: their rule groups go through promtool,
and their selectors and relabelings are checked against what the operator
actually renders."""

import json
import subprocess

import kubernetes_validate
import pytest
import yaml

from support.monitoring import CHART, DASHBOARDS, alerts, selectors
from support.tools import tool
from ttsfleet_operator import labels
from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.render.deployment import METRICS_PATH
from ttsfleet_operator.render.service import HTTP_PORT_NAME
from ttsfleet_operator.tts_service import TTSService

MONITORING_ON = {
    "monitoring": {
        "podMonitors": {
            "enabled": True,
            "labels": {"release": "kube-prometheus-stack"},
            "interval": "30s",
        },
        "rules": {"enabled": True},
        "alerts": {
            "enabled": True,
            "ttfaP99TargetSeconds": 0.3,
            "runbookBaseURL": "https://wiki.example/tts.md/",
        },
        "dashboards": {
            "enabled": True,
            "namespace": "grafana",
            "annotations": {"grafana_folder": "TTS"},
        },
    }
}


def helm(*args: str, values: dict | None = None, tmp_path=None) -> subprocess.CompletedProcess:
    extra = []
    if values is not None:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        extra = ["-f", str(path)]
    return subprocess.run(
        [tool("helm"), *args, *extra], capture_output=True, text=True, timeout=120
    )


def template(tmp_path, values: dict | None = None, *args: str) -> list[dict]:
    result = helm(
        "template",
        "ttsfleet",
        str(CHART),
        "--namespace",
        "ttsfleet-system",
        *args,
        values=values,
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(manifests: list[dict], kind: str) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return template(tmp_path_factory.mktemp("helm"), MONITORING_ON)


def test_nothing_of_monitoring_renders_by_default_but_the_operator_still_serves_metrics(tmp_path):
    manifests = template(tmp_path)
    assert not {"PodMonitor", "PrometheusRule", "ConfigMap"} & {m["kind"] for m in manifests}
    (deployment,) = by_kind(manifests, "Deployment").values()
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-port=8081" in container["args"]
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container["ports"]


def test_lint_passes_with_monitoring_on(tmp_path):
    result = helm("lint", "--strict", str(CHART), values=MONITORING_ON, tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_without_recording_rules_are_refused(tmp_path):
    values = {"monitoring": {"alerts": {"enabled": True}}}
    result = helm("template", "ttsfleet", str(CHART), values=values, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "needs monitoring.rules.enabled" in result.stderr


def test_alerts_without_the_podmonitors_are_refused(tmp_path):
    # The target-down alerts select `up` by the job names the PodMonitors set.
    values = {"monitoring": {"rules": {"enabled": True}, "alerts": {"enabled": True}}}
    result = helm("template", "ttsfleet", str(CHART), values=values, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "needs monitoring.podMonitors.enabled" in result.stderr


def test_dashboards_ship_as_valid_configmaps_for_the_grafana_sidecar(rendered):
    configmaps = by_kind(rendered, "ConfigMap")
    assert sorted(configmaps) == ["ttsfleet-dashboard-canary", "ttsfleet-dashboard-fleet"]
    shipped = {}
    for configmap in configmaps.values():
        kubernetes_validate.validate(configmap, "1.35", strict=True)
        assert configmap["metadata"]["namespace"] == "grafana"
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "TTS"}
        ((key, text),) = configmap["data"].items()
        shipped[key] = json.loads(text)
    assert shipped == {path.name: json.loads(path.read_text()) for path in DASHBOARDS}


def test_prometheus_rules_are_the_rule_files_with_the_values_applied(rendered, tmp_path):
    rules = by_kind(rendered, "PrometheusRule")
    assert sorted(rules) == ["ttsfleet-alerts", "ttsfleet-recording"]
    assert rules["ttsfleet-recording"]["spec"] == yaml.safe_load(
        (CHART / "rules/ttsfleet-recording.yaml").read_text()
    )
    alert_rules = [r for g in rules["ttsfleet-alerts"]["spec"]["groups"] for r in g["rules"]]
    (target,) = [
        r
        for r in alert_rules
        if r.get("record") == "ttsfleet:time_to_first_audio_p99_target:seconds"
    ]
    assert target["expr"] == "vector(0.3)"
    urls = [r["annotations"]["runbook_url"] for r in alert_rules if "alert" in r]
    assert len(urls) == len(alerts()) == 12
    assert all(url.startswith("https://wiki.example/tts.md#ttsfleet") for url in urls), urls
    # What the Prometheus Operator loads must still be a valid rule file.
    for name, rule in rules.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(rule["spec"]))
        result = subprocess.run(
            [tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


def pod_label_meta(key: str) -> str:
    """How Prometheus' Kubernetes discovery names a pod label."""
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in key)


def runtime_pod_labels() -> list[dict]:
    service = TTSService.model_validate(
        {
            "apiVersion": "ttsfleet.io/v1alpha1",
            "kind": "TTSService",
            "metadata": {"name": "demo", "namespace": "voice", "uid": "u"},
            "spec": {
                "model": {"size": "1.7B", "variant": "CustomVoice"},
                "replicas": 2,
                "spot": {"ratio": 0.5},
            },
        }
    )
    return [
        m["spec"]["template"]["metadata"]["labels"]
        for m in render_fleet(service)
        if m["kind"] == "Deployment"
    ]


def test_runtime_podmonitor_selects_the_rendered_pods_and_names_their_labels(rendered):
    monitor = by_kind(rendered, "PodMonitor")["ttsfleet-runtime"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    pods = runtime_pod_labels()
    assert len(pods) == 2
    for pod in pods:
        assert monitor["spec"]["selector"]["matchLabels"].items() <= pod.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == (
        HTTP_PORT_NAME,
        METRICS_PATH,
        "30s",
    )
    relabel = {
        r["targetLabel"]: r.get("sourceLabels") or r["replacement"] for r in endpoint["relabelings"]
    }
    assert relabel == {
        "job": "ttsfleet-runtime",
        "service": [pod_label_meta(labels.SERVICE)],
        "track": [pod_label_meta(labels.TRACK)],
        "pool": [pod_label_meta(labels.POOL)],
    }
    for pod in pods:
        assert {labels.SERVICE, labels.TRACK, labels.POOL} <= pod.keys()


def test_runtime_podmonitor_watches_only_the_watched_namespaces(tmp_path):
    values = {**MONITORING_ON, "watchNamespaces": ["voice", "music"]}
    monitor = by_kind(template(tmp_path, values), "PodMonitor")["ttsfleet-runtime"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["voice", "music"]}


def test_operator_podmonitor_scrapes_the_metrics_port_and_keeps_the_services_namespace(rendered):
    monitor = by_kind(rendered, "PodMonitor")["ttsfleet-operator"]
    (deployment,) = by_kind(rendered, "Deployment").values()
    pod = deployment["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ttsfleet-system"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert f"--metrics-port={ports[endpoint['port']]}" in pod["spec"]["containers"][0]["args"]


def test_podmonitors_set_the_job_labels_the_target_down_alerts_select(rendered):
    """The Prometheus Operator's default job, "<namespace>/<PodMonitor name>", depends on
    the release; the alerts on `up` need one they can name."""
    jobs = {}
    for name, monitor in by_kind(rendered, "PodMonitor").items():
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (job,) = [r for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
        assert "sourceLabels" not in job and job.get("action", "replace") == "replace"
        jobs[name] = job["replacement"]
    assert jobs == {
        "ttsfleet-operator": "ttsfleet-operator",
        "ttsfleet-runtime": "ttsfleet-runtime",
    }
    selected = {
        matchers["job"]
        for rule in alerts()
        for name, matchers in selectors(rule["expr"])
        if name == "up"
    }
    assert selected == {("Equal", job) for job in jobs.values()}
