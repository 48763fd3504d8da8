"""The voice-agent load mode's arithmetic (loadtest/agents.py): the replies and their
deltas, and what a level counts as stalled."""

from __future__ import annotations

from ttsfleet_runtime.loadtest.agents import (
    AgentPlan,
    deltas,
    level_failures,
    reply,
    summarise_level,
)
from ttsfleet_runtime.loadtest.timings import Thresholds

TEXTS = ["one two three four five.", "six seven eight nine ten."]


def test_a_reply_is_cut_at_a_word_and_sent_in_equal_deltas():
    text = reply(TEXTS, 1, 20)
    assert text == "six seven eight nine"
    assert deltas(text, 6) == ["six se", "ven ei", "ght ni", "ne"]
    assert "".join(deltas(text, 4)) == text


def utterance(k, ttfa_ms=40.0, underruns=0, finished=True):
    return {
        "utterance": k,
        "started": True,
        "finished": finished,
        "ttfa_ms": ttfa_ms,
        "server_ttfa_ms": 20.0,
        "send_lag_ms": 1.0,
        "underruns": underruns,
        "stall_s": 0.1 * underruns,
        "audio_s": 1.0,
    }


def test_a_level_counts_underruns_unfinished_and_server_closed_sessions_as_stalls():
    plan = AgentPlan(utterances=2)
    records = [
        {
            "session": 0,
            "status": 200,
            "error": None,
            "closed_by_server": False,
            "utterances": [utterance(0), utterance(1)],
        },
        {
            "session": 1,
            "status": 200,
            "error": None,
            "closed_by_server": False,
            "utterances": [utterance(0, underruns=2), utterance(1)],
        },
        # The server closed it during its first utterance: the second never started.
        {
            "session": 2,
            "status": None,
            "error": "ConnectionClosedError: 1011",
            "closed_by_server": True,
            "utterances": [
                utterance(0, ttfa_ms=None, finished=False),
                {"utterance": 1, "finished": False, "started": False},
            ],
        },
    ]
    summary = summarise_level(records, plan, sessions=3)
    assert summary["utterances_planned"] == 6
    assert summary["utterances_finished"] == 4
    assert summary["underrun_utterances"] == 1
    assert summary["unfinished_utterances"] == 2
    assert summary["stalled"] == 3
    assert summary["sessions_closed_by_server"] == 1
    assert summary["sessions_failed"] == 1
    assert summary["ttfa_ms"]["p50"] == 40.0
    why = level_failures(summary, Thresholds(ttfa_p95_ms=80, underrun_share=0.01))
    assert why == ["stalled utterances 50.00% >= 1.00%"]


def test_a_slow_or_silent_level_says_why_in_the_words_of_a_rate():
    limits = Thresholds(ttfa_p95_ms=80, underrun_share=0.01)
    slow = {"ttfa_ms": {"p95": 120.0}, "stalled_share": 0.0}
    silent = {"ttfa_ms": {"p95": None}, "stalled_share": 1.0}
    assert level_failures(slow, limits) == ["ttfa p95 120 ms > 80"]
    assert level_failures(silent, limits) == [
        "no utterance got audio",
        "stalled utterances 100.00% >= 1.00%",
    ]
