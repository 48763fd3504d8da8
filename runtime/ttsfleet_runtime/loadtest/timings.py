"""The load test's arithmetic: playback underruns, percentiles, one rate's summary, the
capacity knee. Pure functions over recorded timings (no I/O, no clock), so each is
unit-tested on synthetic numbers.

Playback model (a client's audio player): playback starts when the first byte arrives and
plays at real time; a chunk that arrives after all audio before it has finished playing is
an underrun: the listener hears silence from that moment until the chunk arrives (the
stall), then playback goes on from the chunk's arrival.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterable, Sequence

BYTES_PER_SAMPLE = 2  # the PCM the load test asks for: s16le mono

# What a request ended as: served, or the kind of refusal or failure.
OK = "ok"
RATE_LIMITED = "429"
SERVER_ERROR = "5xx"
CLIENT_ERROR = "4xx"  # other refusals (bad key, bad input): the test is misconfigured
TRANSPORT = "transport"  # no HTTP answer, a timeout, or a stream cut after it started
OUTCOMES = (OK, RATE_LIMITED, SERVER_ERROR, CLIENT_ERROR, TRANSPORT)


def outcome(status: int | None, cut: bool) -> str:
    """The outcome of a request that got `status` (None: none came) and was or was not cut."""
    if status is None or (status == 200 and cut):
        return TRANSPORT
    if status == 200:
        return OK
    if status == 429:
        return RATE_LIMITED
    return SERVER_ERROR if status >= 500 else CLIENT_ERROR


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the closest ranks (numpy's default);
    None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclasses.dataclass(frozen=True)
class Playback:
    underruns: int
    stall_s: float
    audio_s: float


def playback(chunks: Sequence[tuple[float, int]], bytes_per_second: float) -> Playback:
    """Underruns of one stream: `chunks` are (arrival time in s, bytes) in arrival order."""
    audible = [(at, size) for at, size in chunks if size > 0]
    if not audible:
        return Playback(0, 0.0, 0.0)
    first_at, first_size = audible[0]
    played_until = first_at + first_size / bytes_per_second
    underruns, stall_s = 0, 0.0
    for at, size in audible[1:]:
        if at > played_until:
            underruns += 1
            stall_s += at - played_until
            played_until = at
        played_until += size / bytes_per_second
    return Playback(underruns, stall_s, sum(size for _, size in audible) / bytes_per_second)


def max_overlap(intervals: Iterable[tuple[float, float]]) -> int:
    """The most intervals (start, end) open at one moment (an end before a start that
    coincides with it: back to back is not overlapping)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    # At equal times (-1, ...) sorts before (1, ...): ends are counted first.
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """What a rate must meet to count as within capacity."""

    ttfa_p95_ms: float = 150.0
    underrun_share: float = 0.01  # of streams that got audio: fewer than this stalled
    error_share: float = 0.01  # of requests: fewer than this refused or failed


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def audio_within(sample: dict, window_s: float) -> float:
    """Seconds of a sample's audio that arrived by `window_s` after its phase started."""
    arrived = sum(
        size for t_ms, size in sample["chunks"] if sample["at_s"] + t_ms / 1000 <= window_s
    )
    return arrived / (sample["sample_rate"] * BYTES_PER_SAMPLE)


def summarise(samples: Sequence[dict], window_s: float) -> dict:
    """One rate's (or burst's) numbers from its per-request samples (as `streams` records
    them: at_s, outcome, ttfa_ms, sent_ms, chunks, audio_s, underruns, stall_s).
    audio-s/s is the audio that arrived within `window_s` of the phase's start (a rate's
    arrival window; a burst's whole length), divided by it."""
    n = len(samples)
    streamed = [s for s in samples if s["ttfa_ms"] is not None]
    ttfa = [s["ttfa_ms"] for s in streamed]
    stalled = [s for s in streamed if s["underruns"] > 0]
    audio_s = sum(s["audio_s"] for s in samples)
    delivered = sum(audio_within(s, window_s) for s in samples)
    counts = {kind: sum(s["outcome"] == kind for s in samples) for kind in OUTCOMES}
    # What a server with a response cache answered (X-TTSFleet-Cache), and the TTFA of hits.
    answers = collections.Counter(s.get("cache") for s in samples if s.get("cache"))
    hits = [s["ttfa_ms"] for s in streamed if (s.get("cache") or "").startswith("hit-")]
    return {
        "requests": n,
        "ok": counts[OK],
        "streams_with_audio": len(streamed),
        "ttfa_ms": {
            "p50": _round(percentile(ttfa, 50)),
            "p95": _round(percentile(ttfa, 95)),
            "p99": _round(percentile(ttfa, 99)),
            "max": _round(max(ttfa, default=None)),
        },
        "underrun_share": round(len(stalled) / len(streamed), 4) if streamed else None,
        "underruns": sum(s["underruns"] for s in streamed),
        "stall_s": round(sum(s["stall_s"] for s in streamed), 3),
        "audio_s": round(audio_s, 3),
        "audio_s_per_s": round(delivered / window_s, 2) if window_s > 0 else None,
        "window_s": round(window_s, 3),
        "share": {kind: round(counts[kind] / n, 4) if n else None for kind in OUTCOMES[1:]},
        # How late the client itself sent (its event loop); large values mean the client,
        # not the server, limited the test.
        "send_lag_ms_p99": _round(percentile([s["sent_ms"] for s in samples], 99), 2),
        "cache": dict(sorted(answers.items())),
        "cache_hit_ttfa_ms": {
            "p50": _round(percentile(hits, 50)),
            "p95": _round(percentile(hits, 95)),
        },
    }


def listening_failures(
    ttfa_p95_ms: float | None, stalled_share: float | None, limits: Thresholds, unit: str
) -> list[str]:
    """Why what listeners heard is past the limits (empty: within): the p95 TTFA and the
    share of `unit`s (streams, utterances) that stalled. Every load-test mode judges
    with this one function, so a rate and an agent level pass by the same rules."""
    why = []
    if ttfa_p95_ms is None:
        why.append(f"no {unit} got audio")
    elif ttfa_p95_ms > limits.ttfa_p95_ms:
        why.append(f"ttfa p95 {ttfa_p95_ms:g} ms > {limits.ttfa_p95_ms:g}")
    if stalled_share is not None and stalled_share >= limits.underrun_share:
        why.append(f"stalled {unit}s {stalled_share:.2%} >= {limits.underrun_share:.2%}")
    return why


def failures(summary: dict, limits: Thresholds) -> list[str]:
    """Why a rate's summary is past capacity (empty: within): what its listeners heard,
    and the requests refused or failed."""
    why = listening_failures(
        summary["ttfa_ms"]["p95"], summary["underrun_share"], limits, unit="stream"
    )
    errors = 1 - summary["ok"] / summary["requests"] if summary["requests"] else 1.0
    if errors >= limits.error_share:
        why.append(f"refused or failed {errors:.2%} >= {limits.error_share:.2%}")
    return why


def knee(rates: Sequence[dict]) -> float | None:
    """The capacity knee: the highest rate whose summary passed (None if none did)."""
    return max((r["rate_rps"] for r in rates if r["passed"]), default=None)


def keep_climbing(passed: Sequence[bool], stop_after: int) -> bool:
    """False once the last `stop_after` rates all failed (the climb is past the knee);
    0 climbs through every rate."""
    if stop_after <= 0:
        return True
    tail = passed[-stop_after:]
    return len(tail) < stop_after or any(tail)
