"""One request as a listener sees it, over HTTP or the WebSocket, and the server's
/metrics sampled while the test runs.

HTTP: `POST /v1/audio/speech` with `response_format: "pcm"`, `stream_format: "audio"`
(raw s16le mono at `X-Audio-Sample-Rate`, chunked as it is generated). WebSocket:
`/v1/audio/speech/stream`, one session per request (config, the text, end), audio as
binary frames (server/speech_socket.py has the protocol). Every time is taken on one
monotonic clock and recorded relative to the request's scheduled send time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

from .. import metrics
from .timings import BYTES_PER_SAMPLE, outcome, playback

SPEECH_ROUTE = "/v1/audio/speech"
SOCKET_ROUTE = "/v1/audio/speech/stream"
DEFAULT_SAMPLE_RATE = 24000
ERROR_TEXT_CHARS = 300

# A WebSocket error's code -> the status the same refusal gets over HTTP
# (server/README.md, "What each bad input gets").
_SOCKET_STATUS = {
    "rate_limited": 429,
    "queue_full": 429,
    "too_many_sessions": 429,
    "draining": 503,
    "engine_stopped": 503,
    "cuda_oom": 503,
    "internal": 500,
    "engine_error": 500,
    "invalid_api_key": 401,
    "model_not_found": 404,
}


@dataclasses.dataclass(frozen=True)
class Target:
    """Where and what to ask: the server's base URL (http or https) and the request fields."""

    url: str
    model: str
    voice: str
    api_key: str | None = None
    protocol: str = "http"  # or "websocket"
    timeout_s: float = 120.0
    # Sent with every HTTP request when set: `seed` makes the audio reproducible, which a
    # server's response cache then serves after the first time (docs/response-cache.md).
    speech_seed: int | None = None
    cache: bool | None = None

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def socket_url(self) -> str:
        return "ws" + self.url.removeprefix("http") + SOCKET_ROUTE

    def connect(self):
        """A WebSocket session on the server's speech stream (`async with`), as every
        load-test client opens it: no compression (audio does not compress, and deflate
        costs the client's event loop), no keepalive pings (a session lasts seconds; a ping
        answered late under load would close it), no message size cap (audio frames)."""
        from websockets.asyncio.client import connect

        return connect(
            self.socket_url(),
            additional_headers=self.headers(),
            compression=None,
            ping_interval=None,
            max_size=None,
        )


@dataclasses.dataclass
class _Recording:
    scheduled: float
    sent: float = 0.0
    status: int | None = None
    error: str | None = None
    cut: bool = False  # the answer started, then broke off
    cache: str | None = None  # the X-TTSFleet-Cache answer (a server with a response cache)
    sample_rate: int = DEFAULT_SAMPLE_RATE
    chunks: list = dataclasses.field(default_factory=list)  # (clock time, bytes)

    def sample(self, at_s: float, text: str) -> dict:
        done = time.perf_counter()

        def ms(t: float) -> float:
            return round((t - self.scheduled) * 1000, 2)

        bytes_per_second = self.sample_rate * BYTES_PER_SAMPLE
        heard = playback([(t - self.scheduled, size) for t, size in self.chunks], bytes_per_second)
        first = next((t for t, size in self.chunks if size > 0), None)
        return {
            "at_s": round(at_s, 4),
            "sent_ms": ms(self.sent),
            "status": self.status,
            "outcome": outcome(self.status, self.cut),
            "error": self.error,
            "ttfa_ms": None if first is None else ms(first),
            "done_ms": ms(done),
            "audio_s": round(heard.audio_s, 4),
            "underruns": heard.underruns,
            "stall_s": round(heard.stall_s, 4),
            "text_chars": len(text),
            "sample_rate": self.sample_rate,
            "cache": self.cache,
            "chunks": [[ms(t), size] for t, size in self.chunks],
        }


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_CHARS]


async def request(client, target: Target, text: str, scheduled: float, at_s: float) -> dict:
    """Send one request at its scheduled clock time (already reached) and record it;
    never raises (a failure is the sample's outcome)."""
    rec = _Recording(scheduled=scheduled, sent=time.perf_counter())
    try:
        async with asyncio.timeout(target.timeout_s):
            if target.protocol == "websocket":
                await _over_socket(target, text, rec)
            else:
                await _over_http(client, target, text, rec)
    except TimeoutError:
        rec.error = f"no end of stream within {target.timeout_s:g} s"
        rec.cut = True
    except Exception as exc:  # connection refused, reset, TLS, protocol: a transport failure
        rec.error = _error_text(exc)
        rec.cut = True
    return rec.sample(at_s, text)


async def _over_http(client, target: Target, text: str, rec: _Recording) -> None:
    body = {
        "model": target.model,
        "input": text,
        "voice": target.voice,
        "response_format": "pcm",
        "stream_format": "audio",
    }
    if target.speech_seed is not None:
        body["seed"] = target.speech_seed
    if target.cache is not None:
        body["cache"] = target.cache
    async with client.stream(
        "POST", target.url + SPEECH_ROUTE, json=body, headers=target.headers()
    ) as response:
        rec.status = response.status_code
        if rec.status != 200:
            rec.error = (await response.aread()).decode(errors="replace")[:ERROR_TEXT_CHARS]
            return
        rec.sample_rate = int(response.headers.get("x-audio-sample-rate", DEFAULT_SAMPLE_RATE))
        rec.cache = response.headers.get("x-ttsfleet-cache")
        async for data in response.aiter_raw():
            rec.chunks.append((time.perf_counter(), len(data)))


async def _over_socket(target: Target, text: str, rec: _Recording) -> None:
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    config = {"type": "session.config", "model": target.model, "voice": target.voice}
    try:
        async with target.connect() as ws:
            try:
                for message in (config, {"type": "text.delta", "text": text}, {"type": "end"}):
                    await ws.send(json.dumps(message))
            except ConnectionClosed:
                pass  # refused at once: its error message is still to be read
            async for message in ws:
                if isinstance(message, bytes):
                    rec.chunks.append((time.perf_counter(), len(message)))
                    continue
                event = json.loads(message)
                kind = event.get("type")
                if kind == "session.ready":
                    rec.sample_rate = int(event.get("sample_rate", DEFAULT_SAMPLE_RATE))
                elif kind == "session.done":
                    rec.status = 200
                elif kind == "error":
                    code = event.get("code")
                    rec.status = _SOCKET_STATUS.get(code, 400)
                    rec.error = f"{code}: {event.get('message')}"[:ERROR_TEXT_CHARS]
    except InvalidStatus as exc:  # refused before the upgrade
        rec.status = exc.response.status_code
        rec.error = _error_text(exc)
    except ConnectionClosed as exc:
        if rec.status is None:
            rec.error = _error_text(exc)
            rec.cut = True
    if rec.status is None and rec.error is None:
        rec.error = "closed without session.done"
        rec.cut = True


# The gauges sampled from /metrics during a run; a phase keeps the max and the mean of
# each (the HPA compares the mean of queue depth and utilisation with its targets).
_SAMPLED = {
    metrics.GPU_MEMORY_USED: "gpu_memory_used_bytes",
    metrics.GPU_MEMORY_TOTAL: "gpu_memory_total_bytes",
    metrics.GPU_UTILIZATION: "gpu_utilization",
    metrics.ACTIVE_STREAMS: "active_streams",
    metrics.QUEUE_DEPTH: "queue_depth",
}


_BUSY = metrics.ENGINE_BUSY  # counter by phase: values[_BUSY] = {phase: seconds}


def parse_metrics(text: str) -> tuple[dict, dict | None]:
    """The sampled gauges of one /metrics text (summed over GPUs; utilisation is then
    GPUs' worth), the engine's busy seconds by phase, and the build_info labels
    (None where absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict = {}
    build = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _SAMPLED:
                values[sample.name] = values.get(sample.name, 0) + sample.value
            elif sample.name == _BUSY:
                values.setdefault(_BUSY, {})[sample.labels["phase"]] = sample.value
            elif sample.name == metrics.BUILD_INFO:
                build = dict(sample.labels)
    return values, build


class MetricsSampler:
    """Scrapes the server's /metrics every `interval_s` while running; `peaks(start, end)`
    is what a phase reports. A deployment that does not expose /metrics gives nulls."""

    def __init__(self, client, url: str | None, interval_s: float):
        self.client = client
        self.url = url
        self.interval_s = interval_s
        self.readings: list[tuple[float, dict]] = []
        self.build_info: dict | None = None
        self.last_error: str | None = None

    async def scrape(self) -> None:
        if not self.url:
            return
        try:
            response = await self.client.get(self.url, timeout=5)
            response.raise_for_status()
            values, build = parse_metrics(response.text)
        except Exception as exc:  # keep sampling; the JSON says why there are no readings
            self.last_error = _error_text(exc)
            return
        self.readings.append((time.perf_counter(), values))
        self.build_info = build or self.build_info

    async def run(self) -> None:
        while self.url:
            await self.scrape()
            await asyncio.sleep(self.interval_s)

    def peaks(self, start: float, end: float) -> dict:
        readings = [(t, values) for t, values in self.readings if start <= t <= end]
        inside = [values for _, values in readings]
        out = {"scrapes": len(inside)}
        for name, key in _SAMPLED.items():
            seen = [values[name] for values in inside if name in values]
            out[f"{key}_max"] = max(seen) if seen else None
            out[f"{key}_mean"] = round(sum(seen) / len(seen), 3) if seen else None
        out["engine_busy_share"] = busy_shares(readings)
        return out


def busy_shares(readings: list[tuple[float, dict]]) -> dict[str, float] | None:
    """Per engine phase, the share of wall time its thread was busy in it between the
    first and the last reading (the rate of ttsfleet_engine_busy_seconds_total); None
    with fewer than two readings or a server that does not expose it."""
    if len(readings) < 2:
        return None
    (t0, first), (t1, last) = readings[0], readings[-1]
    phases = [key for key in last.get(_BUSY, {}) if key in first.get(_BUSY, {})]
    if not phases or t1 <= t0:
        return None
    return {p: round((last[_BUSY][p] - first[_BUSY][p]) / (t1 - t0), 3) for p in phases}
