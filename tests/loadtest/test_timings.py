"""The load test's arithmetic on synthetic timings: playback underruns, percentiles, one
rate's summary, the knee and when the climb stops. Values are chosen exact in binary, so
the assertions are equalities."""

from __future__ import annotations

import random

import pytest

from ttsfleet_runtime.loadtest import timings
from ttsfleet_runtime.loadtest.runner import arrival_times
from ttsfleet_runtime.loadtest.texts import builtin_texts, load_texts

BPS = 1000  # bytes per second of audio: 1 byte = 1 ms


def test_a_stream_that_stays_ahead_of_playback_never_underruns():
    # 0.5 s at t=1, then each 0.5 s chunk arrives just as (or before) the last one ends.
    chunks = [(1.0, 500), (1.5, 500), (1.75, 500), (2.5, 500)]
    assert timings.playback(chunks, BPS) == timings.Playback(0, 0.0, 2.0)


def test_a_late_chunk_is_an_underrun_and_playback_resumes_at_its_arrival():
    # Plays 1.0-1.5; the next chunk arrives at 2.0: 0.5 s stall, plays 2.0-2.25; the next
    # arrives at 2.25 exactly (not late) and plays until 2.5, so a chunk at 2.75 is late
    # again, by 0.25 s.
    chunks = [(1.0, 500), (2.0, 250), (2.25, 250), (2.75, 500)]
    assert timings.playback(chunks, BPS) == timings.Playback(2, 0.75, 1.5)


def test_empty_chunks_are_not_audio_and_playback_starts_at_the_first_byte():
    chunks = [(0.5, 0), (1.0, 250), (1.125, 0), (1.25, 250)]
    assert timings.playback(chunks, BPS) == timings.Playback(0, 0.0, 0.5)
    assert timings.playback([], BPS) == timings.Playback(0, 0.0, 0.0)


def test_percentiles_interpolate_between_ranks():
    values = [40.0, 10.0, 30.0, 20.0, 50.0]  # unsorted on purpose
    assert timings.percentile(values, 50) == 30.0
    assert timings.percentile(values, 95) == 48.0  # rank 3.8: 40 + 0.8 * 10
    assert timings.percentile(values, 99) == 49.6
    assert timings.percentile(values, 0) == 10.0 and timings.percentile(values, 100) == 50.0
    assert timings.percentile([7.0], 99) == 7.0
    assert timings.percentile([], 50) is None


def sample(outcome="ok", ttfa=None, underruns=0, stall=0.0, at=0.0, chunks=(), sent=0.5):
    chunk_list = [list(c) for c in chunks]
    return {
        "at_s": at,
        "sent_ms": sent,
        "outcome": outcome,
        "ttfa_ms": ttfa,
        "chunks": chunk_list,
        "sample_rate": 500,  # 1000 bytes a second
        "audio_s": sum(size for _, size in chunk_list) / 1000,
        "underruns": underruns,
        "stall_s": stall,
    }


def test_a_rate_summary_counts_outcomes_stalls_and_audio_within_the_window():
    samples = [
        sample(ttfa=10.0, at=0.0, chunks=[(10.0, 1000), (1000.0, 1000)]),
        sample(ttfa=20.0, at=1.0, chunks=[(20.0, 1000), (2000.0, 1000)], underruns=2, stall=0.5),
        sample(ttfa=30.0, at=2.0, chunks=[(30.0, 1000)]),
        sample(ttfa=40.0, at=3.0, chunks=[(40.0, 500)], outcome=timings.TRANSPORT),  # cut
        sample(outcome=timings.RATE_LIMITED, at=3.5),
    ]
    summary = timings.summarise(samples, window_s=4.0)
    assert summary["requests"] == 5 and summary["ok"] == 3
    assert summary["streams_with_audio"] == 4
    assert summary["ttfa_ms"] == {"p50": 25.0, "p95": 38.5, "p99": 39.7, "max": 40.0}
    assert summary["underrun_share"] == 0.25  # 1 of the 4 streams that got audio
    assert summary["underruns"] == 2 and summary["stall_s"] == 0.5
    # 5.5 s arrived, all of it within 4 s of the start (the last chunk at 3.0 + 0.04 s).
    assert summary["audio_s"] == 5.5 and summary["audio_s_per_s"] == 1.38
    # Within 2.5 s: all but the chunks at 1.0 + 2.0 and 3.0 + 0.04 s (4 of 5.5 s).
    assert timings.summarise(samples, window_s=2.5)["audio_s_per_s"] == 1.6
    assert summary["share"] == {"429": 0.2, "5xx": 0.0, "4xx": 0.0, "transport": 0.2}
    assert summary["send_lag_ms_p99"] == 0.5


def test_a_rate_passes_only_under_every_threshold():
    limits = timings.Thresholds(ttfa_p95_ms=100.0, underrun_share=0.01, error_share=0.01)
    good = [sample(ttfa=float(t), chunks=[(t, 100)]) for t in range(1, 101)]
    assert timings.failures(timings.summarise(good, 1.0), limits) == []

    slow = good[:-10] + [sample(ttfa=500.0, chunks=[(500.0, 100)]) for _ in range(10)]
    assert timings.failures(timings.summarise(slow, 1.0), limits) == ["ttfa p95 500 ms > 100"]
    stalled = good[:-1] + [sample(ttfa=1.0, underruns=1, chunks=[(1.0, 100)])]
    assert timings.failures(timings.summarise(stalled, 1.0), limits) == [
        "stalled streams 1.00% >= 1.00%"
    ]
    refused = good[:-1] + [sample(outcome=timings.RATE_LIMITED)]
    assert timings.failures(timings.summarise(refused, 1.0), limits) == [
        "refused or failed 1.00% >= 1.00%"
    ]
    nothing = [sample(outcome=timings.SERVER_ERROR)]
    assert timings.failures(timings.summarise(nothing, 1.0), limits) == [
        "no stream got audio",
        "refused or failed 100.00% >= 1.00%",
    ]


def test_the_knee_is_the_highest_passing_rate_and_the_climb_stops_after_failures():
    rates = [
        {"rate_rps": 1.0, "passed": True},
        {"rate_rps": 10.0, "passed": True},
        {"rate_rps": 20.0, "passed": False},
        {"rate_rps": 40.0, "passed": True},  # noise: a pass after a failure still counts
        {"rate_rps": 60.0, "passed": False},
    ]
    assert timings.knee(rates) == 40.0
    assert timings.knee([{"rate_rps": 1.0, "passed": False}]) is None
    assert timings.keep_climbing([True, False], stop_after=2)
    assert not timings.keep_climbing([True, False, False], stop_after=2)
    assert timings.keep_climbing([False, True, False], stop_after=2)
    assert not timings.keep_climbing([False, False], stop_after=2)  # no knee at all
    assert timings.keep_climbing([], stop_after=1)
    assert timings.keep_climbing([False] * 5, stop_after=0)


def test_outcomes_by_status():
    assert timings.outcome(200, cut=False) == timings.OK
    assert timings.outcome(200, cut=True) == timings.TRANSPORT
    assert timings.outcome(None, cut=True) == timings.TRANSPORT
    assert timings.outcome(429, cut=False) == timings.RATE_LIMITED
    assert timings.outcome(503, cut=False) == timings.SERVER_ERROR
    assert timings.outcome(401, cut=False) == timings.CLIENT_ERROR


def test_streams_open_at_once():
    assert timings.max_overlap([(0, 10), (1, 5), (5, 7), (10, 12)]) == 2
    assert timings.max_overlap([(0, 10)] * 3) == 3
    assert timings.max_overlap([]) == 0


def test_arrivals_are_seeded_and_at_the_rate():
    constant = arrival_times(4.0, 2.0, "constant", random.Random(0))
    assert constant == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    first = arrival_times(50.0, 20.0, "poisson", random.Random(7))
    assert first == arrival_times(50.0, 20.0, "poisson", random.Random(7))
    assert first == sorted(first) and first[0] > 0 and first[-1] < 20.0
    assert 900 < len(first) < 1100  # 1,000 expected; a Poisson count's sd is about 32


def test_builtin_texts_are_about_the_asked_length_and_files_load(tmp_path):
    for text in builtin_texts(4.0):
        assert 8 <= len(text.split()) <= 12, text  # 10 words: 4 s at 2.5 words a second
    assert len(set(builtin_texts(4.0))) == len(builtin_texts(4.0))
    lines = tmp_path / "texts.txt"
    lines.write_text('Hello there.\n\n{"input": "From JSON."}\n{"text": "Also JSON."}\n')
    assert load_texts(lines) == ["Hello there.", "From JSON.", "Also JSON."]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"voice": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_texts(bad)
