"""The load test's chart: time to first audio (p50, p95, p99) against the arrival rate,
the latency threshold and the capacity knee marked, the share of streams that stalled
on a second axis. Drawn from the result JSON alone, so it can be redrawn later
(`ttsfleet loadtest chart RESULT.json --out X.png`). Needs matplotlib (Agg backend)."""

from __future__ import annotations

from pathlib import Path

INSTALL_HINT = "pip install matplotlib"


def draw(result: dict, path: Path) -> Path:
    """Write the PNG of a rates result to `path`; raise ValueError for a result with no
    rates (a burst is a table, not a curve) and ImportError without matplotlib."""
    rates = [r for r in result.get("rates") or [] if r["ttfa_ms"]["p50"] is not None]
    if not rates:
        raise ValueError("no rate with audio to chart (a burst result has none)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    x = [r["rate_rps"] for r in rates]
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    try:
        for key, style in (("p50", "-o"), ("p95", "-s"), ("p99", "-^")):
            ax.plot(x, [r["ttfa_ms"][key] for r in rates], style, label=f"TTFA {key}")
        limit = result["thresholds"]["ttfa_p95_ms"]
        ax.axhline(limit, color="grey", linestyle="--", linewidth=1)
        ax.annotate(
            f"p95 limit {limit:g} ms",
            (x[0], limit),
            textcoords="offset points",
            xytext=(2, 4),
            color="grey",
            fontsize=8,
        )
        ax.set_yscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.set_xlabel("arrivals per second")
        ax.set_ylabel("time to first audio (ms, from the scheduled send)")
        knee = result.get("knee_rps")
        if knee is not None:
            ax.axvline(knee, color="green", linewidth=1.5)
            ax.annotate(
                f"knee {knee:g}/s",
                (knee, ax.get_ylim()[1]),
                textcoords="offset points",
                xytext=(4, -14),
                color="green",
            )
        stalls = ax.twinx()
        shares = [100 * (r["underrun_share"] or 0.0) for r in rates]
        stalls.bar(x, shares, width=max(x) / 60 or 0.5, color="red", alpha=0.3, label="stalled")
        stalls.set_ylabel("streams with an underrun (%)", color="red")
        stalls.set_ylim(0, max(5.0, max(shares) * 1.1))
        ax.set_zorder(stalls.get_zorder() + 1)  # the curves over the bars
        ax.patch.set_visible(False)
        lines, labels = ax.get_legend_handles_labels()
        more, more_labels = stalls.get_legend_handles_labels()
        ax.legend(lines + more, labels + more_labels, loc="upper left", fontsize=8)
        server = result.get("server", {})
        build = server.get("build_info") or {}
        what = " ".join(str(v) for v in (build.get("size"), server.get("model")) if v)
        ax.set_title(
            f"{what}: {server.get('protocol', 'http')}, {rates[0]['arrivals']} arrivals, "
            f"{rates[0]['duration_s']:g} s a rate",
            fontsize=10,
        )
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
