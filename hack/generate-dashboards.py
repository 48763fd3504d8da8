#!/usr/bin/env python3
"""Write the Grafana dashboards the chart ships (charts/ttsfleet/dashboards/*.json).

The JSON is generated so every panel uses the same data source variable, the
same namespace/service filters and a computed layout; tests/monitoring checks
that the committed files are this script's output and that every query is valid
PromQL naming only metrics we export. Run it after changing a panel:

    python hack/generate-dashboards.py
"""

from __future__ import annotations

import json
import pathlib
import sys

OUT = pathlib.Path(__file__).resolve().parents[1] / "charts" / "ttsfleet" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Every per-service query carries this filter, so the template variables apply.
F = 'namespace=~"$namespace", service=~"$service"'
TRACK_COLOURS = {"stable": "blue", "canary": "orange"}


class Layout:
    """Places panels left to right in rows of 24 grid units, assigning ids."""

    def __init__(self):
        self.panels: list[dict] = []
        self.x = 0
        self.y = 0
        self.row_height = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "id": len(self.panels) + 1,
                "collapsed": False,
                "panels": [],
                "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1},
            }
        )
        self.y += 1

    def add(self, panel: dict, w: int, h: int) -> None:
        if self.x + w > 24:
            self._newline()
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_height
        self.x = 0
        self.row_height = 0


def targets(queries: list[tuple[str, str]]) -> list[dict]:
    return [
        {
            "datasource": DATASOURCE,
            "expr": expr,
            "legendFormat": legend,
            "refId": chr(ord("A") + i),
            "range": True,
        }
        for i, (expr, legend) in enumerate(queries)
    ]


def timeseries(
    title: str,
    description: str,
    queries: list[tuple[str, str]],
    unit: str,
    *,
    threshold: float | None = None,
    by_track: bool = False,
    stack: bool = False,
) -> dict:
    defaults = {
        "unit": unit,
        "min": 0,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 2,
            "fillOpacity": 10 if stack else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        },
    }
    if threshold is not None:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": "green", "value": None}, {"color": "red", "value": threshold}],
        }
        defaults["custom"]["thresholdsStyle"] = {"mode": "line+area"}
    overrides = []
    if by_track:
        overrides = [
            {
                "matcher": {"id": "byRegexp", "options": f".*{track}.*"},
                "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": colour}}],
            }
            for track, colour in TRACK_COLOURS.items()
        ]
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets(queries),
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["lastNotNull", "max"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(
    title: str,
    description: str,
    expr: str,
    unit: str,
    *,
    legend: str = "",
    text_mode: str = "value",
    red_above: float | None = None,
) -> dict:
    steps = [{"color": "green", "value": None}]
    if red_above is not None:
        steps.append({"color": "red", "value": red_above})
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [
            {
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
                "refId": "A",
                "instant": True,
            }
        ],
        "fieldConfig": {
            "defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": text_mode,
            "colorMode": "value",
            "graphMode": "none",
        },
    }


def variable(name: str, label: str, query: str, *, multi: bool) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        **({"allValue": ".*"} if multi else {}),
        "current": {},
        "hide": 0,
        "regex": "",
    }


def dashboard(uid: str, title: str, description: str, layout: Layout, *, multi: bool) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["ttsfleet"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "",
        "schemaVersion": 39,
        "version": 1,
        "links": [
            {
                "type": "dashboards",
                "tags": ["ttsfleet"],
                "title": "ttsfleet",
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                },
                variable(
                    "namespace",
                    "Namespace",
                    "label_values(ttsfleet_build_info, namespace)",
                    multi=multi,
                ),
                variable(
                    "service",
                    "Service",
                    'label_values(ttsfleet_build_info{namespace=~"$namespace"}, service)',
                    multi=multi,
                ),
            ]
        },
        "panels": layout.panels,
    }


def fleet() -> dict:
    s = Layout()
    s.add(
        stat(
            "Speech requests/s",
            "Synthesis requests per second, all selected services.",
            f"sum(namespace_service_track:ttsfleet_speech_requests:rate1m{{{F}}})",
            "reqps",
        ),
        5,
        4,
    )
    s.add(
        stat(
            "Worst TTFA p95",
            "Highest p95 time to first audio of any selected service and track.",
            f"max(namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m"
            f'{{{F}, quantile="0.95"}})',
            "s",
            red_above=0.5,
        ),
        5,
        4,
    )
    s.add(
        stat(
            "Worst server error ratio",
            "Highest share of API requests failing by the server's fault.",
            f"max(namespace_service_track:ttsfleet_server_error_ratio:rate5m{{{F}}})",
            "percentunit",
            red_above=0.01,
        ),
        5,
        4,
    )
    s.add(
        stat(
            "Ready pods",
            "Runtime pods admitting work.",
            f"sum(namespace_service_pool:ttsfleet_ready_pods:sum{{{F}}})",
            "none",
        ),
        4,
        4,
    )
    s.add(
        stat(
            "Waiting requests",
            "Requests waiting for a batch slot, all pods.",
            f"sum(namespace_service_track:ttsfleet_queue_depth:sum{{{F}}})",
            "none",
            red_above=50,
        ),
        5,
        4,
    )

    s.row("Traffic")
    s.add(
        timeseries(
            "Speech requests/s",
            "Synthesis requests (HTTP and WebSocket utterances), any status.",
            [
                (
                    f"sum by (namespace, service) (namespace_service_track:ttsfleet_speech_requests:rate1m{{{F}}})",
                    "{{namespace}}/{{service}}",
                )
            ],
            "reqps",
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "Audio generated",
            "Seconds of audio sent per second: above the request rate times the "
            "utterance length means streams are long.",
            [
                (
                    f"sum by (namespace, service) (namespace_service_track:ttsfleet_audio_seconds:rate1m{{{F}}})",
                    "{{namespace}}/{{service}}",
                )
            ],
            "none",
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "API responses by status",
            "Finished API requests per second by HTTP status.",
            [
                (
                    f'sum by (code) (rate(ttsfleet_requests_total{{{F}, route=~"/v1/.+"}}[$__rate_interval]))',
                    "{{code}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        8,
        8,
    )

    s.row("Latency")
    s.add(
        timeseries(
            "Time to first audio",
            "p50/p95/p99 from request received to first audio chunk, over 5 "
            "minutes; the dashed threshold is the alert's p99 target.",
            [
                (
                    f"namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m{{{F}}}",
                    "{{service}} {{track}} p{{quantile}}",
                ),
                ("ttsfleet:time_to_first_audio_p99_target:seconds", "p99 target"),
            ],
            "s",
        ),
        12,
        9,
    )
    s.add(
        timeseries(
            "Real-time factor",
            "Generation time per second of audio (p50/p95); below 1 is faster than real time.",
            [
                (
                    f"namespace_service_track:ttsfleet_real_time_factor:histogram_quantile5m{{{F}}}",
                    "{{service}} {{track}} p{{quantile}}",
                )
            ],
            "none",
            threshold=1,
        ),
        6,
        9,
    )
    s.add(
        timeseries(
            "Request duration p95",
            "Request received to last audio.",
            [
                (
                    f"histogram_quantile(0.95, sum by (namespace, service, le) "
                    f"(rate(ttsfleet_request_duration_seconds_bucket{{{F}}}[$__rate_interval])))",
                    "{{namespace}}/{{service}}",
                )
            ],
            "s",
        ),
        6,
        9,
    )

    s.row("Errors")
    s.add(
        timeseries(
            "Server error ratio",
            "Share of API requests failing by the server's fault "
            "(internal, cuda_oom, engine_error); the alert fires above 1%.",
            [
                (
                    f"namespace_service_track:ttsfleet_server_error_ratio:rate5m{{{F}}}",
                    "{{namespace}}/{{service}} {{track}}",
                )
            ],
            "percentunit",
            threshold=0.01,
        ),
        12,
        8,
    )
    s.add(
        timeseries(
            "Errors by type",
            "Refusals and failures per second by type, client and server.",
            [(f"sum by (type) (rate(ttsfleet_errors_total{{{F}}}[$__rate_interval]))", "{{type}}")],
            "reqps",
            stack=True,
        ),
        12,
        8,
    )

    s.row("Capacity")
    s.add(
        timeseries(
            "Queue depth",
            "Requests waiting for a batch slot: average per pod (what the HPA "
            "averages) and the busiest pod.",
            [
                (
                    f"namespace_service_track:ttsfleet_queue_depth:avg{{{F}}}",
                    "{{service}} {{track}} avg/pod",
                ),
                (
                    f"max by (namespace, service) (ttsfleet_queue_depth{{{F}}})",
                    "{{service}} busiest pod",
                ),
            ],
            "none",
            threshold=50,
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "Active streams",
            "Requests holding a batch slot (generating).",
            [
                (
                    f"namespace_service_track:ttsfleet_active_streams:sum{{{F}}}",
                    "{{service}} {{track}}",
                )
            ],
            "none",
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "Replicas by pool",
            "Ready runtime pods on on-demand and spot nodes, the replicas the "
            "operator asks of each pool, and the on-demand floor.",
            [
                (
                    f"namespace_service_pool:ttsfleet_ready_pods:sum{{{F}}}",
                    "{{service}} ready {{pool}}",
                ),
                (
                    f"sum by (namespace, service, pool) "
                    f"(namespace_service_track_pool:ttsfleet_operator_replicas:max{{{F}}})",
                    "{{service}} desired {{pool}}",
                ),
                (
                    f"namespace_service:ttsfleet_operator_on_demand_floor:max{{{F}}}",
                    "{{service}} on-demand floor",
                ),
            ],
            "none",
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "GPU utilisation",
            "Average over each service's pods (NVML, else DCGM).",
            [
                (
                    f"namespace_service_track:ttsfleet_gpu_utilization:avg{{{F}}}",
                    "{{service}} {{track}}",
                )
            ],
            "percentunit",
            threshold=0.9,
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "GPU utilisation per pod",
            "Each pod's GPUs (NVML, else DCGM).",
            [
                (
                    f"namespace_service_track_pool_pod:ttsfleet_gpu_utilization:ratio{{{F}}}",
                    "{{pod}} ({{pool}})",
                )
            ],
            "percentunit",
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "GPU memory used",
            "Used over total GPU memory, per service (NVML).",
            [
                (
                    f"namespace_service_track:ttsfleet_gpu_memory_used:ratio{{{F}}}",
                    "{{service}} {{track}}",
                )
            ],
            "percentunit",
        ),
        8,
        8,
    )

    s.row("Response cache")
    s.add(
        timeseries(
            "Cache answers",
            "Speech requests per second by what the response cache did: hit at a level, "
            "miss (made now, then stored), bypass (not meant to be reproducible).",
            [
                (
                    f"sum by (namespace, service, result) "
                    f"(rate(ttsfleet_response_cache_requests_total{{{F}}}[$__rate_interval]))",
                    "{{service}} {{result}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        8,
        7,
    )
    s.add(
        timeseries(
            "Cache hit ratio by level",
            "Hits over reads at each level (memory, redis, s3), fastest first.",
            [
                (
                    f"sum by (namespace, service, level) (rate(ttsfleet_response_cache_lookups_total"
                    f'{{{F}, result="hit"}}[$__rate_interval]))'
                    f" / sum by (namespace, service, level) "
                    f"(rate(ttsfleet_response_cache_lookups_total{{{F}}}[$__rate_interval]))",
                    "{{service}} {{level}}",
                )
            ],
            "percentunit",
        ),
        8,
        7,
    )
    s.add(
        timeseries(
            "Cache faults",
            "Per second: entries that failed their checksum (served as misses), Redis or S3 "
            "calls that failed (requests went on as misses), memory evictions.",
            [
                (
                    f"sum by (namespace, service, level) "
                    f"(rate(ttsfleet_response_cache_corrupt_total{{{F}}}[$__rate_interval]))",
                    "{{service}} corrupt {{level}}",
                ),
                (
                    f"sum by (namespace, service, level) "
                    f"(rate(ttsfleet_response_cache_errors_total{{{F}}}[$__rate_interval]))",
                    "{{service}} errors {{level}}",
                ),
                (
                    f"sum by (namespace, service) "
                    f"(rate(ttsfleet_response_cache_evictions_total{{{F}}}[$__rate_interval]))",
                    "{{service}} evictions",
                ),
            ],
            "ops",
        ),
        8,
        7,
    )
    s.row("Batch jobs")
    s.add(
        timeseries(
            "Batch items",
            "Items per second the pods' batch workers finished, by outcome: completed, failed "
            "(the item's fault), released (handed back: draining), lost (lease lapsed).",
            [
                (
                    f"sum by (namespace, service, outcome) "
                    f"(rate(ttsfleet_batch_items_total{{{F}}}[$__rate_interval]))",
                    "{{service}} {{outcome}}",
                )
            ],
            "ops",
            stack=True,
        ),
        8,
        7,
    )
    s.add(
        timeseries(
            "Batch audio",
            "Seconds of batch audio made per second (stored in the bucket, not streamed).",
            [
                (
                    f"sum by (namespace, service) "
                    f"(rate(ttsfleet_batch_audio_seconds_total{{{F}}}[$__rate_interval]))",
                    "{{service}}",
                )
            ],
            "short",
        ),
        8,
        7,
    )
    s.add(
        timeseries(
            "Batch items held and allowed",
            "Items the workers synthesise now, and how many their pacing allows: allowed "
            "drops while interactive time to first audio is over --batch-ttfa-budget.",
            [
                (
                    f"sum by (namespace, service) (ttsfleet_batch_items_held{{{F}}})",
                    "{{service}} held",
                ),
                (
                    f"sum by (namespace, service) (ttsfleet_batch_items_allowed{{{F}}})",
                    "{{service}} allowed",
                ),
            ],
            "short",
        ),
        8,
        7,
    )
    s.row("Operator")
    s.add(
        timeseries(
            "Reconcile duration",
            "p50 and p95 of one reconcile pass.",
            [
                (
                    f"histogram_quantile({q}, sum by (le) "
                    f"(rate(ttsfleet_operator_reconcile_duration_seconds_bucket[$__rate_interval])))",
                    f"p{q[2:]}",
                )
                for q in ("0.50", "0.95")
            ],
            "s",
        ),
        6,
        7,
    )
    s.add(
        timeseries(
            "Reconcile passes by result",
            "Passes per second: ok, error (reported problem), exception.",
            [
                (
                    "sum by (result) (rate(ttsfleet_operator_reconcile_duration_seconds_count[$__rate_interval]))",
                    "{{result}}",
                )
            ],
            "ops",
            stack=True,
        ),
        6,
        7,
    )
    s.add(
        timeseries(
            "Reconcile errors",
            "Failed passes per second by service, reason and failing kind.",
            [
                (
                    f"sum by (namespace, service, reason, kind) "
                    f"(rate(ttsfleet_operator_reconcile_errors_total{{{F}}}[$__rate_interval]))",
                    "{{namespace}}/{{service}} {{reason}} {{kind}}",
                )
            ],
            "ops",
        ),
        6,
        7,
    )
    s.add(
        timeseries(
            "Managed objects",
            "TTSServices and the children the operator keeps for them, by kind.",
            [("max by (kind) (ttsfleet_operator_managed_objects)", "{{kind}}")],
            "none",
        ),
        6,
        7,
    )
    return dashboard(
        "ttsfleet-fleet",
        "ttsfleet / Fleet",
        "Every TTSService's traffic, latency, errors and capacity, by namespace and service.",
        s,
        multi=True,
    )


def canary() -> dict:
    s = Layout()
    by_track = [("stable", "Stable"), ("canary", "Candidate")]
    s.add(
        stat(
            "Canary state",
            "The operator's canary state for this service.",
            f"max by (state) (ttsfleet_operator_canary_state{{{F}}}) == 1",
            "none",
            legend="{{state}}",
            text_mode="name",
        ),
        4,
        4,
    )
    s.add(
        stat(
            "Candidate share",
            "Share of synthesis requests the candidate served.",
            f'sum(namespace_service_track:ttsfleet_speech_requests:rate1m{{{F}, track="canary"}}) / '
            f"sum(namespace_service_track:ttsfleet_speech_requests:rate1m{{{F}}})",
            "percentunit",
        ),
        4,
        4,
    )
    for track, name in by_track:
        s.add(
            stat(
                f"{name} TTFA p95",
                f"p95 time to first audio of the {track} track, over 5 minutes.",
                f"max(namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m"
                f'{{{F}, track="{track}", quantile="0.95"}})',
                "s",
            ),
            4,
            4,
        )
    for track, name in by_track:
        s.add(
            stat(
                f"{name} error ratio",
                f"Server-fault error ratio of the {track} track.",
                f'max(namespace_service_track:ttsfleet_server_error_ratio:rate5m{{{F}, track="{track}"}})',
                "percentunit",
                red_above=0.01,
            ),
            4,
            4,
        )

    s.row("Stable vs candidate")
    s.add(
        timeseries(
            "Time to first audio p95",
            "By track, over 5 minutes.",
            [
                (
                    f"namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m"
                    f'{{{F}, quantile="0.95"}}',
                    "{{track}}",
                )
            ],
            "s",
            by_track=True,
        ),
        12,
        8,
    )
    s.add(
        timeseries(
            "Time to first audio p99",
            "By track, over 5 minutes.",
            [
                (
                    f"namespace_service_track:ttsfleet_time_to_first_audio_seconds:histogram_quantile5m"
                    f'{{{F}, quantile="0.99"}}',
                    "{{track}}",
                )
            ],
            "s",
            by_track=True,
        ),
        12,
        8,
    )
    s.add(
        timeseries(
            "Server error ratio",
            "By track; the canary analysis counts the same error types.",
            [(f"namespace_service_track:ttsfleet_server_error_ratio:rate5m{{{F}}}", "{{track}}")],
            "percentunit",
            threshold=0.01,
            by_track=True,
        ),
        12,
        8,
    )
    s.add(
        timeseries(
            "Speech requests/s",
            "By track: the traffic split.",
            [(f"namespace_service_track:ttsfleet_speech_requests:rate1m{{{F}}}", "{{track}}")],
            "reqps",
            by_track=True,
        ),
        12,
        8,
    )
    s.add(
        timeseries(
            "Real-time factor p95",
            "By track.",
            [
                (
                    f"namespace_service_track:ttsfleet_real_time_factor:histogram_quantile5m"
                    f'{{{F}, quantile="0.95"}}',
                    "{{track}}",
                )
            ],
            "none",
            by_track=True,
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "Queue depth per pod",
            "By track.",
            [(f"namespace_service_track:ttsfleet_queue_depth:avg{{{F}}}", "{{track}}")],
            "none",
            by_track=True,
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "GPU utilisation",
            "By track.",
            [(f"namespace_service_track:ttsfleet_gpu_utilization:avg{{{F}}}", "{{track}}")],
            "percentunit",
            by_track=True,
        ),
        8,
        8,
    )
    s.add(
        timeseries(
            "Errors by type",
            "By track and type.",
            [
                (
                    f"sum by (track, type) (rate(ttsfleet_errors_total{{{F}}}[$__rate_interval]))",
                    "{{track}} {{type}}",
                )
            ],
            "reqps",
            by_track=True,
        ),
        12,
        8,
    )
    s.add(
        timeseries(
            "Ready pods",
            "By track and pool.",
            [(f"sum by (track, pool) (ttsfleet_ready{{{F}}})", "{{track}} {{pool}}")],
            "none",
            by_track=True,
        ),
        12,
        8,
    )
    return dashboard(
        "ttsfleet-canary",
        "ttsfleet / Canary",
        "One service's stable and candidate tracks side by side.",
        s,
        multi=False,
    )


DASHBOARDS = {"ttsfleet-fleet.json": fleet, "ttsfleet-canary.json": canary}


def render() -> dict[str, str]:
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
