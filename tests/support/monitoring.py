"""What the monitoring tests share: where things are, the names we export and PromQL
walking. The real Prometheus server is support.prometheus."""

from __future__ import annotations

import pathlib

import promql_parser
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ttsfleet"
RULE_FILES = sorted((CHART / "rules").glob("*.yaml"))
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
RUNBOOKS = REPO / "docs" / "runbooks.md"

# Names from outside this project that our queries read, each on purpose:
# the DCGM exporter's GPU utilisation (percent) is the HPA's GPU signal where
# it runs; the rules fall back to it when the runtime has no NVML reading.
EXTERNAL_METRICS = frozenset({"DCGM_FI_DEV_GPU_UTIL"})
# Series Prometheus writes itself for every target it scrapes: the target-down
# alerts read `up` of the jobs the chart's PodMonitors name.
SCRAPE_METRICS = frozenset({"up"})


def _exposed_names(registry) -> set[str]:
    """Series names a registry exposes, from its own exposition (also for
    labelled metrics that have no child yet)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    names = set()
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


class _OneGpu:
    def read(self):
        return [(0.5, 1, 2)]


def runtime_metric_names() -> set[str]:
    """Every series name the runtime server exposes (GPU gauges included)."""
    from ttsfleet_runtime.engine.api import EngineStats
    from ttsfleet_runtime.metrics import RuntimeMetrics

    # The engine's own stats type: a field the engine adds is there with its default.
    stats = EngineStats(
        queue_depth=0,
        active=0,
        max_batch=1,
        max_queue=1,
        frames_total=0,
        min_lead_s=0.5,  # a stream is playing: the lead gauge is exposed
        busy_seconds={"decode": 0.0},
        startup_seconds={"total": 1.0},
    )
    return _exposed_names(RuntimeMetrics(lambda: stats, lambda: True, gpu=_OneGpu()).registry)


def operator_metric_names() -> set[str]:
    """Every series name the operator exposes (with a service and a canary state set)."""
    from ttsfleet_operator.canary import state_machine
    from ttsfleet_operator.metrics import OperatorMetrics
    from ttsfleet_operator.reconcile import Outcome
    from ttsfleet_operator.render import render_fleet
    from ttsfleet_operator.tts_service import TTSService

    body = {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": "demo", "namespace": "voice", "uid": "u"},
        "spec": {"model": {"size": "1.7B", "variant": "CustomVoice"}},
    }
    m = OperatorMetrics()
    rendered = render_fleet(TTSService.model_validate(body))
    m.observe(body, Outcome(rendered=rendered, on_demand_floor=0, canary_phase=state_machine.IDLE))
    return _exposed_names(m.registry)


def rule_groups() -> list[dict]:
    groups = []
    for path in RULE_FILES:
        groups += yaml.safe_load(path.read_text())["groups"]
    return groups


def recorded_names() -> set[str]:
    return {
        rule["record"] for group in rule_groups() for rule in group["rules"] if "record" in rule
    }


def alerts() -> list[dict]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def exported_names() -> set[str]:
    return (
        runtime_metric_names()
        | operator_metric_names()
        | recorded_names()
        | EXTERNAL_METRICS
        | SCRAPE_METRICS
    )


# Grafana's template variables, as a query sees them on the server.
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "${namespace}": ".*",
    "${service}": ".*",
    "$namespace": ".*",
    "$service": ".*",
}


def grafana_to_promql(expr: str) -> str:
    for variable, value in GRAFANA_SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    return expr


def selectors(expr: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """(metric name, {label: (op, value)}) of every vector selector in `expr`."""
    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            matchers = {
                m.name: (str(m.op).rsplit(".", 1)[-1], m.value) for m in node.matchers.matchers
            }
            found.append((node.name, matchers))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found
