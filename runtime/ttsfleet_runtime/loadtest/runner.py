"""The load test itself: arrivals, one phase after another, the result.

A rate is a phase of open-loop arrivals: send times are drawn before it starts (Poisson or
evenly spaced, from the seed), each request is sent at its time whatever the others are
doing, and every latency counts from that scheduled time. The next rate starts once the
last request of this one has ended. The climb stops after `stop_after` failing rates in a
row (past the knee nothing new is learned, and GPU time costs), or when the budget would
run out. A burst is one phase of N requests all scheduled at its start (closed: N streams
at once, nothing more).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import math
import os
import platform
import random
import ssl
import time
from collections.abc import Callable, Sequence

from . import timings
from .agents import AgentClients, AgentPlan, level_failures, summarise_level
from .streams import MetricsSampler, Target, request

# The first request of a phase is sent this long after the phase is set up.
LEAD_S = 0.05
# Requests spread over this many HTTP clients: httpx's pool scans all its connections on
# every request event, so one pool holding hundreds of open streams costs the client more
# CPU than the server's answers (it then sends late and measures itself).
CLIENT_SHARDS = 64


@dataclasses.dataclass
class LoadConfig:
    url: str
    texts: Sequence[str]
    rates: Sequence[float] = (1.0,)
    duration_s: float = 20.0
    arrivals: str = "poisson"  # or "constant"
    seed: int = 0
    concurrency: int | None = None  # a burst of this many instead of the rates
    model: str | None = None  # default: the first of GET /v1/models
    voice: str | None = None  # default: the model's first speaker
    api_key: str | None = None
    protocol: str = "http"
    thresholds: timings.Thresholds = dataclasses.field(default_factory=timings.Thresholds)
    stop_after: int = 2
    timeout_s: float = 120.0
    metrics_url: str | None = None  # default: URL/metrics; "" for none
    metrics_interval_s: float = 0.5
    warmup: int = 2
    budget_s: float | None = None
    speech_seed: int | None = None  # `seed` of every request (reproducible, cacheable audio)
    cache: bool | None = None  # `cache` of every request
    # Voice agents (WebSocket): these many sessions at once, one level after another,
    # each streaming text as `agent_plan` says (agents.py), instead of rates or a burst.
    sessions: Sequence[int] | None = None
    agent_plan: AgentPlan | None = None
    progress: Callable[[dict], None] = lambda line: None


class SetupError(Exception):
    """The server cannot be load-tested as configured (unreachable, key refused, no model)."""


def arrival_times(rate: float, duration_s: float, kind: str, rng: random.Random) -> list[float]:
    """Send times (s from the phase start) of one rate: a Poisson process, or every 1/rate."""
    if kind == "constant":
        return [k / rate for k in range(math.ceil(rate * duration_s - 1e-9))]
    times, t = [], rng.expovariate(rate)
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate)
    return times


def environment() -> dict:
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for name in ("ttsfleet", "httpx", "websockets"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    machine = {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        # The server's threads share one interpreter lock, so a host's single-core speed
        # moves the knee: results from two hosts compare only with their CPUs named.
        "cpu_model": cpu_model(),
    }
    return {"machine": machine, "versions": versions}


def cpu_model() -> str | None:
    """The CPU's model name as Linux reports it (None elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


async def _describe_server(client, config: LoadConfig) -> dict:
    """GET /v1/models: the model and voice to ask for, unless given."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    try:
        response = await client.get(config.url + "/v1/models", headers=headers, timeout=30)
    except Exception as exc:
        raise SetupError(f"cannot reach {config.url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        hint = " (set the key's variable, --api-key-env)" if response.status_code == 401 else ""
        raise SetupError(
            f"GET /v1/models answered {response.status_code}{hint}: {response.text[:200]}"
        )
    models = response.json().get("data") or [{}]
    listed = models[0]
    model = config.model or listed.get("id")
    voice = config.voice or next(iter(listed.get("speakers") or []), None)
    if not model or not voice:
        raise SetupError("the server lists no model or speaker: give --model and --voice")
    return {"model": model, "voice": voice, "listed": listed}


class _Run:
    def __init__(self, config: LoadConfig, clients, target: Target, sampler: MetricsSampler):
        self.config = config
        self.clients = clients
        self.target = target
        self.sampler = sampler
        self.samples: list[dict] = []

    async def phase(self, times: Sequence[float], rng: random.Random, label: dict) -> dict:
        """Send one request at each of `times` (s from now), wait for all; its summary."""
        texts = [rng.choice(self.config.texts) for _ in times]
        start = time.perf_counter() + LEAD_S
        tasks = []
        for index, (offset, text) in enumerate(zip(times, texts, strict=True)):
            scheduled = start + offset
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            client = self.clients[index % len(self.clients)]
            tasks.append(asyncio.create_task(request(client, self.target, text, scheduled, offset)))
        samples = list(await asyncio.gather(*tasks))
        end = time.perf_counter()
        for sample in samples:
            self.samples.append(label | sample)
        await self.sampler.scrape()  # one reading at the end of every phase, however short
        return {"samples": samples, "start": start, "end": end}

    async def warm_up(self) -> None:
        """A few requests one after another (graphs, connections); a refusal that says
        the test is misconfigured stops it here."""
        rng = random.Random(self.config.seed)
        for _ in range(self.config.warmup):
            sample = await request(
                self.clients[0],
                self.target,
                rng.choice(self.config.texts),
                time.perf_counter(),
                0.0,
            )
            if sample["outcome"] == timings.CLIENT_ERROR:
                raise SetupError(f"the server refused a request: {sample['error']}")

    async def rates(self, started: float) -> dict:
        config = self.config
        summaries: list[dict] = []
        stopped = "all rates run"
        drain_s = 5.0  # a guess until the first rate says how long its requests outlive it
        for index, rate in enumerate(config.rates):
            if not timings.keep_climbing([s["passed"] for s in summaries], config.stop_after):
                stopped = f"{config.stop_after} rates in a row past capacity"
                break
            if config.budget_s is not None:
                left = config.budget_s - (time.perf_counter() - started)
                if left < config.duration_s + drain_s:
                    stopped = f"budget: {left:.0f} s left before {rate:g}/s"
                    break
            rng = random.Random(config.seed * 1_000_003 + index)
            times = arrival_times(rate, config.duration_s, config.arrivals, rng)
            ran = await self.phase(times, rng, {"rate_rps": rate})
            drain_s = max(0.0, ran["end"] - ran["start"] - config.duration_s)
            summary = {
                "rate_rps": rate,
                "arrivals": config.arrivals,
                "duration_s": config.duration_s,
                **timings.summarise(ran["samples"], config.duration_s),
                "server": self.sampler.peaks(ran["start"], ran["end"]),
            }
            why = timings.failures(summary, config.thresholds)
            summary |= {"passed": not why, "why": why}
            summaries.append(summary)
            config.progress(progress_line("rate", summary))
        return {"rates": summaries, "knee_rps": timings.knee(summaries), "stopped": stopped}

    async def burst(self) -> dict:
        n = self.config.concurrency
        rng = random.Random(self.config.seed)
        ran = await self.phase([0.0] * n, rng, {"concurrency": n})
        last_byte = max(
            (s["at_s"] + s["chunks"][-1][0] / 1000 for s in ran["samples"] if s["chunks"]),
            default=0.0,
        )
        summary = {
            "concurrency": n,
            **timings.summarise(ran["samples"], last_byte),
            # Streams receiving audio at one moment, as the client saw them.
            "concurrent_streams_seen": timings.max_overlap(
                (s["ttfa_ms"], s["chunks"][-1][0]) for s in ran["samples"] if s["ttfa_ms"]
            ),
            "server": self.sampler.peaks(ran["start"], ran["end"]),
        }
        config = self.config
        config.progress(progress_line("burst", summary))
        return {"burst": summary}

    async def agents(self) -> dict:
        """Each concurrency level of voice-agent sessions, one after another."""
        config = self.config
        plan = config.agent_plan or AgentPlan()
        clients = AgentClients(plan.client_processes)
        levels = []
        try:
            for sessions in config.sessions:
                start = time.perf_counter()
                records = await clients.level(self.target, plan, config.texts, sessions)
                end = time.perf_counter()
                await self.sampler.scrape()
                summary = {
                    **summarise_level(records, plan, sessions),
                    "wall_s": round(end - start, 2),
                    "server": self.sampler.peaks(start, end),
                }
                why = level_failures(summary, config.thresholds)
                summary |= {"passed": not why, "why": why}
                levels.append(summary)
                for record in records:
                    self.samples.append({"sessions": sessions} | record)
                config.progress(agents_progress_line(summary))
        finally:
            clients.close()
        return {"levels": levels, "agent_plan": dataclasses.asdict(plan)}


def agents_progress_line(summary: dict) -> dict:
    """The one structured line a level of agent sessions prints while the test runs."""
    server = summary["server"]
    return {
        "event": "agents",
        "sessions": summary["sessions"],
        "utterances": summary["utterances_planned"],
        "finished": summary["utterances_finished"],
        "ttfa_ms_p50": summary["ttfa_ms"]["p50"],
        "ttfa_ms_p95": summary["ttfa_ms"]["p95"],
        "ttfa_ms_p99": summary["ttfa_ms"]["p99"],
        "server_ttfa_ms_p95": summary["server_ttfa_ms"]["p95"],
        "stalled": summary["stalled"],
        "closed_by_server": summary["sessions_closed_by_server"],
        "send_lag_ms_p99": summary["send_lag_ms_p99"],
        "active_streams_max": server.get("active_streams_max"),
        "engine_busy_share": server.get("engine_busy_share"),
        "passed": summary["passed"],
        "why": summary["why"],
    }


def progress_line(event: str, summary: dict) -> dict:
    """The one structured line a phase prints while the test runs."""
    server = summary["server"]
    used = server.get("gpu_memory_used_bytes_max")
    line = {
        "event": event,
        **{k: summary[k] for k in ("rate_rps", "concurrency") if k in summary},
        "requests": summary["requests"],
        "ok": summary["ok"],
        "ttfa_ms_p50": summary["ttfa_ms"]["p50"],
        "ttfa_ms_p95": summary["ttfa_ms"]["p95"],
        "ttfa_ms_p99": summary["ttfa_ms"]["p99"],
        "underrun_share": summary["underrun_share"],
        "audio_s_per_s": summary["audio_s_per_s"],
        **{f"share_{k}": v for k, v in summary["share"].items()},
        "gpu_memory_used_gib": None if used is None else round(used / 2**30, 2),
        "active_streams_max": server.get("active_streams_max"),
        "queue_depth_mean": server.get("queue_depth_mean"),
    }
    if "passed" in summary:
        line |= {"passed": summary["passed"], "why": summary["why"]}
    return line


def mode(config: LoadConfig) -> str:
    if config.sessions:
        return "agents"
    return "burst" if config.concurrency else "rates"


async def run_load(config: LoadConfig) -> dict:
    """Run the configured test against `config.url`; the result as the JSON holds it."""
    import httpx

    started = time.perf_counter()
    url = config.url.rstrip("/")
    config.url = url
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(config.timeout_s, connect=10.0)
    # One TLS context for every shard (each would load the CA file); httpx's own where it
    # has one (0.28), else the system's.
    tls = getattr(httpx, "create_ssl_context", ssl.create_default_context)()
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(limits=limits, timeout=timeout, verify=tls)
            )
            for _ in range(CLIENT_SHARDS)
        ]
        server = await _describe_server(clients[0], config)
        target = Target(
            url=url,
            model=server["model"],
            voice=server["voice"],
            api_key=config.api_key,
            protocol=config.protocol,
            timeout_s=config.timeout_s,
            speech_seed=config.speech_seed,
            cache=config.cache,
        )
        metrics_url = url + "/metrics" if config.metrics_url is None else config.metrics_url
        sampler = MetricsSampler(clients[0], metrics_url, config.metrics_interval_s)
        run = _Run(config, clients, target, sampler)
        await run.warm_up()
        scraping = asyncio.create_task(sampler.run())
        try:
            if config.sessions:
                outcome = await run.agents()
            elif config.concurrency:
                outcome = await run.burst()
            else:
                outcome = await run.rates(started)
        finally:
            scraping.cancel()
    return {
        "tool": "ttsfleet loadtest",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **environment(),
        "server": {
            "url": url,
            "model": target.model,
            "voice": target.voice,
            "protocol": target.protocol,
            "listed": server["listed"],
            "build_info": sampler.build_info,
            "metrics_error": sampler.last_error if not sampler.readings else None,
        },
        "thresholds": dataclasses.asdict(config.thresholds),
        "mode": mode(config),
        **outcome,
        "wall_s": round(time.perf_counter() - started, 1),
        "samples": run.samples,
    }
