"""The Grafana dashboards: generated, valid PromQL for a real Prometheus, reading
only metrics we export, filtered by the template variables."""

import importlib.util
import json
import re

import pytest

from support.monitoring import DASHBOARDS, REPO, exported_names, grafana_to_promql, selectors

_spec = importlib.util.spec_from_file_location(
    "generate_dashboards", REPO / "hack" / "generate-dashboards.py"
)
generator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generator)

# Series that are not per service: the operator's process-wide ones and the TTFA target.
NOT_PER_SERVICE = {
    "ttsfleet_operator_reconcile_duration_seconds_bucket",
    "ttsfleet_operator_reconcile_duration_seconds_count",
    "ttsfleet_operator_managed_objects",
    "ttsfleet:time_to_first_audio_p99_target:seconds",
}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+), (?P<label>\w+)\)$")


def load(name: str) -> dict:
    return json.loads((REPO / "charts" / "ttsfleet" / "dashboards" / name).read_text())


def panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def queries() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, PromQL as Prometheus receives it) of every target."""
    found = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in panels(dashboard):
            for target in panel["targets"]:
                found.append((path.name, panel["title"], grafana_to_promql(target["expr"])))
        for var in dashboard["templating"]["list"]:
            if var["type"] == "query":
                match = LABEL_VALUES.match(var["query"]["query"])
                assert match, var["query"]
                found.append(
                    (path.name, f"variable {var['name']}", grafana_to_promql(match["selector"]))
                )
    return found


def test_committed_dashboards_are_the_generators_output():
    rendered = generator.render()
    assert sorted(rendered) == sorted(p.name for p in DASHBOARDS)
    for path in DASHBOARDS:
        assert path.read_text() == rendered[path.name], (
            f"run: python hack/generate-dashboards.py ({path.name})"
        )


def test_every_query_is_accepted_by_a_real_prometheus(bare_prometheus):
    assert len(queries()) > 30
    rejected = []
    for name, title, expr in queries():
        status, body = bare_prometheus.api("query", query=expr)
        if status != 200:
            rejected.append(f"{name} / {title}: {body.get('error')}\n  {expr}")
    assert not rejected, "\n".join(rejected)


def test_a_real_prometheus_does_reject_a_broken_query(bare_prometheus):
    """The check above can fail: a parse error comes back as 400."""
    status, body = bare_prometheus.api("query", query="sum by (service (ttsfleet_queue_depth)")
    assert status == 400 and body["errorType"] == "bad_data"


def test_every_metric_a_dashboard_reads_is_one_we_export():
    known = exported_names()
    unknown = {
        (name, title, metric)
        for name, title, expr in queries()
        for metric, _ in selectors(expr)
        if metric not in known
    }
    assert not unknown


def test_per_service_queries_follow_the_namespace_and_service_variables():
    for path in DASHBOARDS:
        for panel in panels(json.loads(path.read_text())):
            for target in panel["targets"]:
                # Only the range variable is replaced: the label matchers keep "$namespace".
                for metric, matchers in selectors(target["expr"].replace("$__rate_interval", "1m")):
                    if metric in NOT_PER_SERVICE:
                        continue
                    assert matchers.get("namespace") == ("Re", "$namespace"), (
                        path.name,
                        panel["title"],
                        metric,
                    )
                    assert matchers.get("service") == ("Re", "$service"), (
                        path.name,
                        panel["title"],
                        metric,
                    )


def test_fleet_overview_shows_what_platform_teams_watch():
    read = {
        metric
        for title, expr in (
            (p["title"], t["expr"])
            for p in panels(load("ttsfleet-fleet.json"))
            for t in p["targets"]
        )
        for metric, _ in selectors(grafana_to_promql(expr))
    }
    assert (
        read
        >= {
            "namespace_service_track:ttsfleet_speech_requests:rate1m",  # requests/s
            "namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m",  # TTFA p50/95/99
            "namespace_service_track:ttsfleet_real_time_factor:histogram_quantile5m",  # RTF
            "namespace_service_track:ttsfleet_server_error_ratio:rate5m",
            "ttsfleet_errors_total",
            "namespace_service_track:ttsfleet_queue_depth:avg",
            "namespace_service_track:ttsfleet_gpu_utilization:avg",
            "namespace_service_track:ttsfleet_gpu_memory_used:ratio",
            "namespace_service_pool:ttsfleet_ready_pods:sum",  # replicas on spot vs on-demand
            "ttsfleet_operator_reconcile_errors_total",
        }
    )


def test_canary_view_splits_every_time_series_by_track():
    for panel in panels(load("ttsfleet-canary.json")):
        if panel["type"] != "timeseries":
            continue
        for target in panel["targets"]:
            assert "{{track}}" in target["legendFormat"], panel["title"]
            # Nothing sums the tracks together: track is kept by every aggregation.
            assert "sum by (namespace, service)" not in target["expr"], panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_layout_and_data_source_are_consistent(path):
    dashboard = json.loads(path.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert dashboard["uid"] == path.stem
