"""`ttsfleet loadtest` (also `ttsfleet-runtime loadtest`): the flags, the run, the files.

    ttsfleet loadtest --url https://tts.example.com --rates 1,10,20,40 --duration-s 20 --out DIR
    ttsfleet loadtest --url ... --concurrency 256 --out DIR        # a burst of 256 streams
    ttsfleet loadtest chart DIR/loadtest.json --out chart.png       # redraw the chart
    ttsfleet loadtest --url ... --protocol websocket --sessions 1,8,32,64 --out DIR
                                    # voice agents: text streamed in at a token rate

Writes DIR/loadtest.json (machine, versions, arguments without secrets, per-rate summary,
raw per-request samples) and DIR/loadtest.png; prints one JSON line per rate while it
runs and a table at the end. The API key is read from the variable --api-key-env names.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

RESULT = "loadtest.json"
CHART = "loadtest.png"


def _rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rates: {text!r}") from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError("rates are positive arrivals per second")
    return rates


def _counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of counts: {text!r}"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("session counts are positive integers")
    return counts


def add_agent_arguments(p: argparse.ArgumentParser) -> None:
    """Voice agents over the WebSocket (loadtest/agents.py)."""
    agents = p.add_argument_group(
        "voice agents (--protocol websocket --sessions ...)",
        "sessions that stream each reply's text at a token rate, then flush",
    )
    agents.add_argument(
        "--sessions",
        type=_counts,
        default=None,
        help="instead of rates: agent sessions at once, one level after another (1,8,32,64)",
    )
    agents.add_argument("--delta-chars", type=int, default=4, help="characters a text.delta")
    agents.add_argument(
        "--delta-interval-ms", type=float, default=25.0, help="between text.deltas (default 25)"
    )
    agents.add_argument("--reply-chars", type=int, default=148, help="characters a reply")
    agents.add_argument(
        "--utterances-per-session", type=int, default=3, help="replies a session speaks"
    )
    agents.add_argument(
        "--ramp-s", type=float, default=2.0, help="a level's sessions start evenly over this"
    )
    agents.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="client processes the sessions are spread over (so the client is not the limit)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
    p.add_argument(
        "--rates",
        type=_rates,
        default="1,10,20,40,60,80,100,120,140,160,200",
        help="arrivals per second, one after another (default: %(default)s)",
    )
    p.add_argument("--duration-s", type=float, default=20.0, help="seconds of arrivals per rate")
    p.add_argument("--arrivals", choices=["poisson", "constant"], default="poisson")
    p.add_argument("--seed", type=int, default=0, help="arrival times and text choice")
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="instead of rates: this many streams at once, one burst (closed)",
    )
    p.add_argument(
        "--utterance-seconds",
        type=float,
        default=4.0,
        help="length of speech of the built-in texts (default 4)",
    )
    p.add_argument("--texts", type=Path, help="texts to speak: one a line, or JSONL with 'input'")
    p.add_argument(
        "--text-count",
        type=int,
        default=None,
        help="speak only the first N texts (a small set that repeats: cache hits)",
    )
    p.add_argument(
        "--speech-seed",
        type=int,
        default=None,
        help="send this `seed` with every request: reproducible audio, served from a "
        "response cache after its first time",
    )
    p.add_argument(
        "--cache",
        choices=["on", "off"],
        default=None,
        help="send `cache: true|false` with every request (default: send none)",
    )
    p.add_argument("--model", help="default: the first of GET /v1/models")
    p.add_argument("--voice", help="default: the model's first speaker")
    p.add_argument(
        "--api-key-env",
        default="TTSFLEET_API_KEY",
        help="variable holding the API key (never printed or written; default %(default)s)",
    )
    p.add_argument("--protocol", choices=["http", "websocket"], default="http")
    p.add_argument("--max-ttfa-p95-ms", type=float, default=150.0, help="knee: p95 TTFA limit")
    p.add_argument(
        "--max-underrun-share",
        type=float,
        default=0.01,
        help="knee: streams that stalled must stay below this share",
    )
    p.add_argument(
        "--max-error-share",
        type=float,
        default=0.01,
        help="knee: refused or failed requests (429, 5xx, transport) must stay below this share",
    )
    p.add_argument(
        "--stop-after",
        type=int,
        default=2,
        help="stop climbing after this many failing rates in a row (0: run every rate)",
    )
    p.add_argument("--timeout-s", type=float, default=120.0, help="per request, to the last byte")
    p.add_argument(
        "--metrics-url",
        default=None,
        help="the server's Prometheus /metrics (default URL/metrics; '' for none)",
    )
    p.add_argument("--warmup", type=int, default=2, help="requests before the first rate")
    p.add_argument(
        "--budget-s", type=float, default=None, help="start no rate that would end later"
    )
    p.add_argument("--out", type=Path, default=Path("."), help=f"folder for {RESULT} and {CHART}")
    add_agent_arguments(p)


def add_chart_action(actions) -> None:
    chart = actions.add_parser(
        "chart",
        help="redraw the PNG from a result JSON",
        description="Draw TTFA percentiles against the arrival rate from a loadtest.json.",
    )
    chart.add_argument("result", type=Path)
    chart.add_argument("--out", type=Path, required=True, help="the PNG to write")
    chart.set_defaults(handler=redraw)


def _texts(args) -> list[str]:
    from .texts import builtin_texts, load_texts

    texts = load_texts(args.texts) if args.texts else builtin_texts(args.utterance_seconds)
    if args.text_count is not None:
        if args.text_count < 1:
            raise ValueError("--text-count must be at least 1")
        texts = texts[: args.text_count]
    return texts


def recorded_args(args: argparse.Namespace) -> dict:
    """The arguments as the JSON records them: paths as text, no handler, no secret (the
    key is never an argument, only the name of its variable)."""
    return {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("handler", "command", "loadtest_action")
    }


def write_result(result: dict, out: Path) -> dict:
    """loadtest.json, and loadtest.png where there are rates and matplotlib; the paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = {"json": out / RESULT}
    (out / RESULT).write_text(json.dumps(result, indent=1) + "\n")
    if result.get("rates"):
        from .chart import INSTALL_HINT, draw

        try:
            written["png"] = draw(result, out / CHART)
        except ImportError:
            print(
                f"no chart: matplotlib is missing ({INSTALL_HINT}); later: "
                f"ttsfleet loadtest chart {out / RESULT} --out {out / CHART}",
                file=sys.stderr,
            )
        except Exception as exc:  # the JSON is written: a chart failure must not lose it
            print(f"no chart: {exc!r}", file=sys.stderr)
    return written


def table(result: dict) -> str:
    """The short table printed last."""
    rows = ["rate/s  reqs  ok    p50 ms   p95 ms   p99 ms  stalled  audio-s/s  429    5xx  pass"]
    if result.get("mode") == "agents":
        return agents_table(result)
    phases = result.get("rates") or ([result["burst"]] if result.get("burst") else [])
    for r in phases:
        t = r["ttfa_ms"]
        label = f"{r['rate_rps']:g}" if "rate_rps" in r else f"N={r['concurrency']}"
        cells = [
            f"{label:>6}",
            f"{r['requests']:5d}",
            f"{r['ok']:5d}",
            *(f"{t[k]:8.1f}" if t[k] is not None else f"{'-':>8}" for k in ("p50", "p95", "p99")),
            f"{(r['underrun_share'] or 0):8.2%}",
            f"{(r['audio_s_per_s'] or 0):10.1f}",
            f"{r['share']['429']:6.1%}",
            f"{r['share']['5xx']:6.1%}",
            " yes" if r.get("passed") else (" no" if "passed" in r else ""),
        ]
        rows.append(" ".join(cells))
    for r in phases:
        if r.get("cache"):
            hit_p95 = r["cache_hit_ttfa_ms"]["p95"]
            label = f"{r['rate_rps']:g}/s" if "rate_rps" in r else f"N={r['concurrency']}"
            answers = ", ".join(f"{k} {v}" for k, v in r["cache"].items())
            rows.append(f"cache at {label}: {answers}; hits' p95 TTFA {hit_p95} ms")
    if result.get("mode") == "rates":
        rows.append(f"knee: {result['knee_rps']} arrivals/s ({result['stopped']})")
    return "\n".join(rows)


def agents_table(result: dict) -> str:
    rows = ["sessions  utts  done   p50 ms   p95 ms   p99 ms  stalled  closed  lag99  pass"]
    for r in result["levels"]:
        t = r["ttfa_ms"]
        cells = [
            f"{r['sessions']:8d}",
            f"{r['utterances_planned']:5d}",
            f"{r['utterances_finished']:5d}",
            *(f"{t[k]:8.1f}" if t[k] is not None else f"{'-':>8}" for k in ("p50", "p95", "p99")),
            f"{r['stalled']:8d}",
            f"{r['sessions_closed_by_server']:7d}",
            f"{(r['send_lag_ms_p99'] or 0):6.1f}",
            " yes" if r["passed"] else " no",
        ]
        rows.append(" ".join(cells))
    return "\n".join(rows)


def agent_plan(args: argparse.Namespace):
    """The agent sessions' plan from the flags; ValueError names a bad one."""
    from .agents import AgentPlan

    if args.sessions and args.protocol != "websocket":
        raise ValueError(
            "--sessions runs voice agents over the WebSocket: add --protocol websocket"
        )
    return AgentPlan(
        delta_chars=args.delta_chars,
        delta_interval_s=args.delta_interval_ms / 1000,
        reply_chars=args.reply_chars,
        utterances=args.utterances_per_session,
        ramp_s=args.ramp_s,
        client_processes=args.client_processes,
    )


def run(args: argparse.Namespace) -> int:
    from .runner import LoadConfig, SetupError, run_load
    from .timings import Thresholds

    try:
        texts = _texts(args)
    except (OSError, ValueError) as exc:
        print(f"--texts: {exc}", file=sys.stderr)
        return 2
    try:
        plan = agent_plan(args)
    except ValueError as exc:
        print(f"loadtest: {exc}", file=sys.stderr)
        return 2
    config = LoadConfig(
        url=args.url,
        texts=texts,
        rates=args.rates,
        duration_s=args.duration_s,
        arrivals=args.arrivals,
        seed=args.seed,
        concurrency=args.concurrency,
        model=args.model,
        voice=args.voice,
        api_key=os.environ.get(args.api_key_env) or None,
        protocol=args.protocol,
        thresholds=Thresholds(args.max_ttfa_p95_ms, args.max_underrun_share, args.max_error_share),
        stop_after=args.stop_after,
        timeout_s=args.timeout_s,
        metrics_url=args.metrics_url,
        warmup=args.warmup,
        budget_s=args.budget_s,
        speech_seed=args.speech_seed,
        cache=None if args.cache is None else args.cache == "on",
        sessions=args.sessions,
        agent_plan=plan,
        progress=lambda line: print(json.dumps(line), flush=True),
    )
    try:
        result = asyncio.run(run_load(config))
    except ModuleNotFoundError as exc:  # httpx, or websockets for --protocol websocket
        print(f"loadtest needs {exc.name}: pip install 'ttsfleet[loadtest]'", file=sys.stderr)
        return 2
    except SetupError as exc:
        print(f"loadtest: {exc}", file=sys.stderr)
        return 2
    result["args"] = recorded_args(args)
    written = write_result(result, args.out)
    print(table(result))
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0


def redraw(args: argparse.Namespace) -> int:
    from .chart import INSTALL_HINT, draw

    try:
        draw(json.loads(args.result.read_text()), args.out)
    except ImportError:
        print(f"matplotlib is missing: {INSTALL_HINT}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot chart {args.result}: {exc!r}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    return 0
