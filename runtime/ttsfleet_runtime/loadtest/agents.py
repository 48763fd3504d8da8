"""Voice agents over the WebSocket: text streamed in as an LLM writes it, audio out.

Each session is one agent: it opens `/v1/audio/speech/stream`, then for each of its
utterances sends a reply of `reply_chars` characters as `text.delta` messages of
`delta_chars` characters every `delta_interval_s` (an LLM's token rate), then `flush`,
and waits for that utterance's audio to end (`utterance.done`) before the next one; after
the last, `end`. Sessions of one concurrency level start evenly over `ramp_s`; the
levels run one after another.

TTFA counts from the utterance's first delta's scheduled send time (the moment an
agent's LLM produced its first token), to the first audio byte. An utterance stalled
when its playback underran (`timings.playback`, as the HTTP mode counts it), or it
never finished (the session failed or the server closed it first).

Sessions are spread over `client_processes` processes (session i in process i mod P):
one asyncio loop parsing hundreds of sessions' audio sends late and measures itself.
Every process reads the same monotonic clock (Linux CLOCK_MONOTONIC), so all times are
relative to one level start. Each sample keeps its own send lag (how late the client
sent its deltas): large lags mean the client, not the server, was the limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import multiprocessing
import time
from collections.abc import Sequence

from . import timings
from .streams import _SOCKET_STATUS, DEFAULT_SAMPLE_RATE, ERROR_TEXT_CHARS, Target, _error_text
from .timings import BYTES_PER_SAMPLE, percentile, playback

# Sessions of a level start this long after the client processes were handed their share.
LEAD_S = 0.5


@dataclasses.dataclass(frozen=True)
class AgentPlan:
    """What every session of a level does."""

    delta_chars: int = 4
    delta_interval_s: float = 0.025
    reply_chars: int = 148
    utterances: int = 3
    ramp_s: float = 2.0
    client_processes: int = 1

    def __post_init__(self):
        if self.delta_chars < 1 or self.reply_chars < 1 or self.utterances < 1:
            raise ValueError("delta chars, reply chars and utterances must be at least 1")
        if self.delta_interval_s < 0 or self.ramp_s < 0 or self.client_processes < 1:
            raise ValueError("intervals and the ramp are >= 0 s, client processes >= 1")


def reply(texts: Sequence[str], index: int, chars: int) -> str:
    """A reply of about `chars` characters (cut at a word), from the texts after `index`."""
    words: list[str] = []
    k = index
    while len(" ".join(words)) < chars:
        words += texts[k % len(texts)].split()
        k += 1
    text = ""
    for word in words:
        if text and len(text) + 1 + len(word) > chars:
            break
        text = f"{text} {word}" if text else word
    return text


def deltas(text: str, size: int) -> list[str]:
    """`text` as consecutive deltas of `size` characters (the last may be shorter)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


@dataclasses.dataclass
class _Utterance:
    first_delta: float  # scheduled send time of its first delta (clock)
    text_chars: int
    last_delta: float | None = None  # when its flush was sent
    send_lag: float = 0.0  # the latest any of its deltas went out after its scheduled time
    chunks: list = dataclasses.field(default_factory=list)  # (clock time, bytes)
    done: float | None = None
    server_ttfa_ms: float | None = None


async def agent_session(
    target: Target, plan: AgentPlan, texts: Sequence[str], index: int, start: float
) -> dict:
    """One agent session started at clock time `start` (waited for here); its record.
    Never raises: a failure is in the record (`error`, `closed_by_server`)."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    delay = start - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    record: dict = {"session": index, "error": None, "status": None, "closed_by_server": False}
    utterances: list[_Utterance] = []
    sample_rate = DEFAULT_SAMPLE_RATE
    config = {"type": "session.config", "model": target.model, "voice": target.voice}
    try:
        async with asyncio.timeout(target.timeout_s):
            async with target.connect() as ws:
                await ws.send(json.dumps(config))
                ready = json.loads(await ws.recv())
                if ready.get("type") != "session.ready":
                    raise _Refused(ready)
                sample_rate = int(ready.get("sample_rate", DEFAULT_SAMPLE_RATE))
                for k in range(plan.utterances):
                    text = reply(texts, index * plan.utterances + k, plan.reply_chars)
                    utterance = await _speak(ws, plan, text, k)
                    utterances.append(utterance)
                    if utterance.done is None:
                        break
                await ws.send(json.dumps({"type": "end"}))
                async for message in ws:
                    if (
                        isinstance(message, str)
                        and json.loads(message).get("type") == "session.done"
                    ):
                        record["status"] = 200
    except _Refused as refused:
        event = refused.event
        record["status"] = _SOCKET_STATUS.get(event.get("code"), 400)
        record["error"] = f"{event.get('code')}: {event.get('message')}"[:ERROR_TEXT_CHARS]
        record["closed_by_server"] = True
    except InvalidStatus as exc:
        record["status"] = exc.response.status_code
        record["error"] = _error_text(exc)
    except ConnectionClosed as exc:
        record["error"] = _error_text(exc)
        record["closed_by_server"] = True
    except TimeoutError:
        record["error"] = f"session not done within {target.timeout_s:g} s"
    except Exception as exc:
        record["error"] = _error_text(exc)
    record["utterances"] = [
        _utterance_sample(u, k, start, sample_rate) for k, u in enumerate(utterances)
    ]
    # Utterances never started (the session ended first) count as unfinished too.
    for k in range(len(utterances), plan.utterances):
        record["utterances"].append({"utterance": k, "finished": False, "started": False})
    return record


class _Refused(Exception):
    def __init__(self, event: dict):
        super().__init__(event.get("message"))
        self.event = event


async def _speak(ws, plan: AgentPlan, text: str, k: int) -> _Utterance:
    """Send one reply at the token rate while receiving its audio; its record once its
    `utterance.done` came (or the session failed: then raises)."""
    pieces = deltas(text, plan.delta_chars)
    first = time.monotonic()
    utterance = _Utterance(first_delta=first, text_chars=len(text))

    async def send() -> None:
        for i, piece in enumerate(pieces):
            due = first + i * plan.delta_interval_s
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            utterance.send_lag = max(utterance.send_lag, time.monotonic() - due)
            await ws.send(json.dumps({"type": "text.delta", "text": piece}))
        await ws.send(json.dumps({"type": "flush"}))
        utterance.last_delta = time.monotonic()

    sender = asyncio.create_task(send())
    ended = False
    try:
        async for message in ws:
            if isinstance(message, bytes):
                utterance.chunks.append((time.monotonic(), len(message)))
                continue
            event = json.loads(message)
            kind = event.get("type")
            if kind == "utterance.done" and event.get("utterance") == k:
                utterance.done = time.monotonic()
                utterance.server_ttfa_ms = event.get("ttfa_ms")
                break
            if kind == "error":
                raise _Refused(event)
        ended = True
    finally:
        if not ended:
            sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    # An utterance the server ended before its flush (its --max-audio-seconds): the
    # reply is still sent to its end and flushed, as an LLM would go on writing; the
    # server drops that text, and the next reply starts the next utterance.
    if sender.exception() is not None:
        raise sender.exception()
    return utterance


def _utterance_sample(u: _Utterance, k: int, start: float, sample_rate: int) -> dict:
    def ms(t: float | None, origin: float) -> float | None:
        return None if t is None else round((t - origin) * 1000, 2)

    heard = playback(
        [(t - u.first_delta, size) for t, size in u.chunks], sample_rate * BYTES_PER_SAMPLE
    )
    first_audio = next((t for t, size in u.chunks if size > 0), None)
    return {
        "utterance": k,
        "started": True,
        "finished": u.done is not None,
        "first_delta_s": round(u.first_delta - start, 4),  # from the session's start
        "ttfa_ms": ms(first_audio, u.first_delta),
        "flush_ms": ms(u.last_delta, u.first_delta),
        "done_ms": ms(u.done, u.first_delta),
        "server_ttfa_ms": u.server_ttfa_ms,
        "send_lag_ms": round(u.send_lag * 1000, 2),
        "text_chars": u.text_chars,
        "audio_s": round(heard.audio_s, 4),
        "underruns": heard.underruns,
        "stall_s": round(heard.stall_s, 4),
        "chunks": [[ms(t, u.first_delta), size] for t, size in u.chunks],
    }


async def _sessions(target: Target, plan: AgentPlan, texts, starts: list[tuple[int, float]]):
    return await asyncio.gather(
        *(agent_session(target, plan, texts, index, start) for index, start in starts)
    )


def _client_process(target: Target, plan: AgentPlan, texts, starts) -> list[dict]:
    """One client process's share of a level (a multiprocessing entry point)."""
    return asyncio.run(_sessions(target, plan, list(texts), starts))


def _ready(_: int) -> bool:  # a client process imported what it needs
    import websockets  # noqa: F401

    return True


class AgentClients:
    """The client processes (spawned once, used by every level) or, for one, this one."""

    def __init__(self, processes: int):
        self.processes = processes
        self.pool = None
        if processes > 1:
            self.pool = multiprocessing.get_context("spawn").Pool(processes)
            self.pool.map(_ready, range(processes), chunksize=1)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()

    async def level(self, target: Target, plan: AgentPlan, texts, sessions: int) -> list[dict]:
        """Run `sessions` agent sessions, started evenly over the ramp; their records."""
        start = time.monotonic() + LEAD_S
        starts = [(i, start + plan.ramp_s * i / sessions) for i in range(sessions)]
        if self.pool is None:
            records = await _sessions(target, plan, texts, starts)
        else:
            shares = [starts[p :: self.processes] for p in range(self.processes)]
            pending = [
                self.pool.apply_async(_client_process, (target, plan, list(texts), share))
                for share in shares
                if share
            ]
            loop = asyncio.get_running_loop()
            records = []
            for result in pending:
                records += await loop.run_in_executor(None, result.get)
        for record in records:
            record["at_s"] = round(dict(starts)[record["session"]] - start, 4)
        return sorted(records, key=lambda r: r["session"])


def summarise_level(records: Sequence[dict], plan: AgentPlan, sessions: int) -> dict:
    """One concurrency level's numbers from its session records."""
    utterances = [u for r in records for u in r["utterances"]]
    started = [u for u in utterances if u.get("started")]
    ttfa = [u["ttfa_ms"] for u in started if u.get("ttfa_ms") is not None]
    underran = [u for u in started if u.get("underruns")]
    unfinished = [u for u in utterances if not u["finished"]]
    stalled = {id(u) for u in underran} | {id(u) for u in unfinished}
    planned = sessions * plan.utterances
    server_ttfa = [u["server_ttfa_ms"] for u in started if u.get("server_ttfa_ms") is not None]

    def pcts(values) -> dict:
        return {
            f"p{q}": None if not values else round(percentile(values, q), 1) for q in (50, 95, 99)
        } | {"max": round(max(values), 1) if values else None}

    return {
        "sessions": sessions,
        "utterances_planned": planned,
        "utterances_finished": planned - len(unfinished),
        "ttfa_ms": pcts(ttfa),
        # The server's own TTFA (from its submission of the utterance): the part of the
        # above spent in the engine rather than waiting for the first word.
        "server_ttfa_ms": pcts(server_ttfa),
        "stalled": len(stalled),
        "stalled_share": round(len(stalled) / planned, 4) if planned else None,
        "underrun_utterances": len(underran),
        "unfinished_utterances": len(unfinished),
        "sessions_closed_by_server": sum(r["closed_by_server"] for r in records),
        "sessions_failed": sum(r["status"] != 200 for r in records),
        "errors": sorted({r["error"] for r in records if r["error"]})[:5],
        "stall_s": round(sum(u.get("stall_s", 0.0) for u in started), 3),
        "audio_s": round(sum(u.get("audio_s", 0.0) for u in started), 3),
        "send_lag_ms_p99": _p99([u["send_lag_ms"] for u in started]),
    }


def _p99(values: list[float]) -> float | None:
    value = percentile(values, 99)
    return None if value is None else round(value, 2)


def level_failures(summary: dict, thresholds: timings.Thresholds) -> list[str]:
    """Why a level is past what agents accept (empty: within). Refused or failed
    sessions need no check of their own: the utterances they did not finish count as
    stalled."""
    return timings.listening_failures(
        summary["ttfa_ms"]["p95"], summary["stalled_share"], thresholds, unit="utterance"
    )


def level_seconds(plan: AgentPlan, audio_s: float) -> float:
    """A rough length of one level when the server keeps up: the ramp, then each
    utterance's text and audio (for a budget's sake)."""
    text_s = math.ceil(plan.reply_chars / plan.delta_chars) * plan.delta_interval_s
    return plan.ramp_s + plan.utterances * (text_s + audio_s) + LEAD_S
