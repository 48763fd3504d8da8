#!/usr/bin/env python3
"""Render panels of the fleet dashboard to a PNG, so a person can see the picture
without a Grafana: the panels' own queries (from the dashboard JSON), run as range
queries against a Prometheus, or read back from a saved series file.

    python hack/render-dashboard.py --prometheus http://127.0.0.1:9090 \
        --namespace voice --service demo --minutes 15 --out docs/dashboard-fleet.png
    python hack/render-dashboard.py --series saved.json --out panel.png

--save-series writes what was queried, so a picture can be re-rendered later.
Needs matplotlib (the test extra).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC

REPO = pathlib.Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "charts" / "ttsfleet" / "dashboards" / "ttsfleet-fleet.json"
PANELS = ("Time to first audio", "Queue depth", "Speech requests/s")
UNIT_LABELS = {"s": "seconds", "reqps": "requests / s", "none": "", "percentunit": "ratio"}


def dashboard_panels(titles=PANELS, path: pathlib.Path = DASHBOARD) -> list[dict]:
    panels = {
        p["title"]: p for p in json.loads(path.read_text())["panels"] if p["type"] == "timeseries"
    }
    missing = [t for t in titles if t not in panels]
    if missing:
        raise SystemExit(f"no panel titled {missing} in {path.name}")
    return [panels[t] for t in titles]


def promql(expr: str, namespace: str, service: str, rate_interval: str) -> str:
    return (
        expr.replace("$namespace", re.escape(namespace) if namespace != ".*" else namespace)
        .replace("$service", re.escape(service) if service != ".*" else service)
        .replace("$__rate_interval", rate_interval)
    )


def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt) or json.dumps(
        labels
    )


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=60) as response:
        body = json.loads(response.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def collect(
    url: str, namespace: str, service: str, minutes: float, step: float, rate_interval: str
) -> dict:
    """{"panels": [{title, unit, series: [{name, points: [[t, v], ...]}]}]} for the chosen panels."""
    end = time.time()
    start = end - minutes * 60
    out = {"namespace": namespace, "service": service, "start": start, "end": end, "panels": []}
    for panel in dashboard_panels():
        series = []
        for target in panel["targets"]:
            expr = promql(target["expr"], namespace, service, rate_interval)
            for result in query_range(url, expr, start, end, step):
                points = [[float(t), float(v)] for t, v in result["values"]]
                series.append(
                    {"name": legend(target["legendFormat"], result["metric"]), "points": points}
                )
        out["panels"].append(
            {
                "title": panel["title"],
                "unit": panel["fieldConfig"]["defaults"]["unit"],
                "description": panel["description"],
                "series": series,
            }
        )
    return out


def render(data: dict, out: pathlib.Path) -> pathlib.Path:
    import matplotlib

    matplotlib.use("Agg")
    from datetime import datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    panels = data["panels"]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(11, 3.2 * len(panels)), sharex=True, squeeze=False
    )
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        for series in panel["series"]:
            if not series["points"]:
                continue
            times = [datetime.fromtimestamp(t, tz=UTC) for t, _ in series["points"]]
            values = [v for _, v in series["points"]]
            style = "--" if "target" in series["name"] else "-"
            ax.plot(times, values, style, linewidth=1.8, label=series["name"])
        ax.set_title(panel["title"], loc="left", fontsize=11, fontweight="bold")
        ax.set_ylabel(UNIT_LABELS.get(panel["unit"], panel["unit"]))
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if panel["series"]:
            ax.legend(loc="upper left", fontsize=8, ncol=2, framealpha=0.8)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="grey")
    axes[-1, 0].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))
    axes[-1, 0].set_xlabel("time (UTC)")
    fig.suptitle(f"ttsfleet / Fleet — {data['namespace']}/{data['service']}", fontsize=13)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", help="Prometheus base URL")
    source.add_argument("--series", type=pathlib.Path, help="a file written by --save-series")
    parser.add_argument("--namespace", default=".*")
    parser.add_argument("--service", default=".*")
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--step", type=float, default=5, help="seconds between points")
    parser.add_argument(
        "--rate-interval", default="1m", help="what Grafana's $__rate_interval becomes"
    )
    parser.add_argument("--save-series", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    if args.prometheus:
        data = collect(
            args.prometheus,
            args.namespace,
            args.service,
            args.minutes,
            args.step,
            args.rate_interval,
        )
    else:
        data = json.loads(args.series.read_text())
    if args.save_series:
        args.save_series.write_text(json.dumps(data))
    render(data, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
