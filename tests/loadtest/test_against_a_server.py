"""`ttsfleet loadtest` end to end against a real `ttsfleet serve` (tiny random checkpoint,
CPU): the result JSON's fields and plausible numbers, the PNG, the chart redraw, the
WebSocket path and a burst; and the JSON without matplotlib.

Random weights never say EOS, so every utterance is exactly the server's
--max-audio-seconds long: the audio each stream received is known."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from support.runtime import RuntimeProcess
from ttsfleet_runtime.loadtest.command import write_result

AUDIO_S = 0.8  # 10 frames a request
SECRET = "sk-never-written-anywhere"
WRONG = "sk-wrong-key-never-written"
PNG = b"\x89PNG\r\n\x1a\n"
# A CPU server is slow: thresholds no rate can miss, so the knee is the highest rate run.
LOOSE = ["--max-ttfa-p95-ms", "60000", "--max-underrun-share", "2", "--max-error-share", "0.5"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_custom_voice):
    """Auth on (RuntimeProcess turns it off; the later flag wins), with the one key
    `loadtest` reads from TTSFLEET_API_KEY."""
    workdir = tmp_path_factory.mktemp("loadtest-server")
    keys = workdir / "keys"
    keys.write_text(f"me: {SECRET}\n")
    process = RuntimeProcess(
        workdir,
        tiny_custom_voice,
        *("--auth", "enabled", "--api-keys-file", str(keys)),
        "--max-audio-seconds",
        str(AUDIO_S),
        "--max-batch",
        "4",
        "--ws-max-sessions-per-key",
        "16",
    )
    try:
        yield process.wait_ready()
    finally:
        process.stop()


def loadtest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime.cli", "loadtest", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TTSFLEET_API_KEY": SECRET, "WRONG_KEY": WRONG},
    )


def test_rates_over_http_write_the_json_and_the_chart(server, tmp_path, tiny_custom_voice):
    done = loadtest(
        *("--url", server.base, "--rates", "1,2", "--duration-s", "2", "--arrivals", "constant"),
        *("--utterance-seconds", "1", "--warmup", "1", "--out", str(tmp_path), *LOOSE),
    )
    assert done.returncode == 0, done.stderr
    progress = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(line["event"], line["rate_rps"]) for line in progress] == [
        ("rate", 1.0),
        ("rate", 2.0),
    ]

    text = (tmp_path / "loadtest.json").read_text()
    assert SECRET not in text and SECRET not in done.stdout + done.stderr
    result = json.loads(text)
    assert result["mode"] == "rates" and result["server"]["protocol"] == "http"
    assert (
        result["server"]["model"] == tiny_custom_voice.name
        and result["server"]["build_info"]["size"] == "tiny"
    )
    assert result["args"]["api_key_env"] == "TTSFLEET_API_KEY"
    assert set(result["machine"]) >= {"host", "cpus", "cpu_model"} and result["versions"]["httpx"]
    rates = result["rates"]
    assert [(r["rate_rps"], r["requests"], r["ok"]) for r in rates] == [(1.0, 2, 2), (2.0, 4, 4)]
    for rate in rates:
        ttfa = rate["ttfa_ms"]
        assert 0 < ttfa["p50"] <= ttfa["p95"] <= ttfa["p99"] <= ttfa["max"] < 30_000
        assert rate["audio_s"] == pytest.approx(rate["requests"] * AUDIO_S)
        assert 0 < rate["audio_s_per_s"] <= rate["audio_s"] / rate["duration_s"]
        assert rate["share"] == {"429": 0.0, "5xx": 0.0, "4xx": 0.0, "transport": 0.0}
        assert 0 <= rate["underrun_share"] <= 1
        assert rate["server"]["scrapes"] >= 1 and rate["server"]["active_streams_max"] is not None
        assert rate["passed"] and rate["why"] == []
    assert result["knee_rps"] == 2.0

    samples = result["samples"]
    assert len(samples) == 6 and {s["rate_rps"] for s in samples} == {1.0, 2.0}
    for s in samples:
        assert s["status"] == 200 and s["outcome"] == "ok" and s["sample_rate"] == 24000
        assert 0 <= s["sent_ms"] < s["ttfa_ms"] == s["chunks"][0][0] <= s["done_ms"]
        assert sum(size for _, size in s["chunks"]) == AUDIO_S * 24000 * 2
    assert [s["at_s"] for s in samples if s["rate_rps"] == 2.0] == [0.0, 0.5, 1.0, 1.5]

    assert (tmp_path / "loadtest.png").read_bytes().startswith(PNG)
    redrawn = tmp_path / "again.png"
    again = subprocess.run(
        [sys.executable, "-m", "ttsfleet_runtime.cli", "loadtest", "chart"]
        + [str(tmp_path / "loadtest.json"), "--out", str(redrawn)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert redrawn.read_bytes().startswith(PNG)


def test_the_websocket_path_streams_the_same_audio(server, tmp_path):
    done = loadtest(
        *("--url", server.base, "--protocol", "websocket", "--rates", "2", "--duration-s", "1"),
        *("--arrivals", "constant", "--warmup", "0", "--out", str(tmp_path), *LOOSE),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "loadtest.json").read_text())
    assert result["server"]["protocol"] == "websocket"
    (rate,) = result["rates"]
    assert rate["requests"] == rate["ok"] == 2
    assert rate["audio_s"] == pytest.approx(2 * AUDIO_S) and rate["ttfa_ms"]["p50"] > 0


def test_a_burst_holds_its_streams_at_once(server, tmp_path):
    done = loadtest(
        *("--url", server.base, "--concurrency", "4", "--utterance-seconds", "1"),
        *("--warmup", "0", "--out", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "loadtest.json").read_text())
    assert result["mode"] == "burst" and "rates" not in result
    burst = result["burst"]
    assert burst["requests"] == burst["ok"] == 4
    assert burst["audio_s"] == pytest.approx(4 * AUDIO_S)
    assert 2 <= burst["concurrent_streams_seen"] <= 4
    assert not (tmp_path / "loadtest.png").exists()  # a burst is a table, not a curve


def test_a_wrong_key_stops_the_test_before_any_rate(server, tmp_path):
    done = loadtest(
        *("--url", server.base, "--api-key-env", "WRONG_KEY", "--rates", "1"),
        *("--out", str(tmp_path)),
    )
    assert done.returncode == 2
    assert "401" in done.stderr and "--api-key-env" in done.stderr
    assert WRONG not in done.stdout + done.stderr and not (tmp_path / "loadtest.json").exists()


def test_without_matplotlib_the_json_is_written_and_says_how_to_draw_later(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    result = {"rates": [{"rate_rps": 1.0, "ttfa_ms": {"p50": 1.0}}], "thresholds": {}}
    written = write_result(result, tmp_path)
    assert set(written) == {"json"} and json.loads(written["json"].read_text()) == result
    assert not (tmp_path / "loadtest.png").exists()
    assert f"ttsfleet loadtest chart {tmp_path / 'loadtest.json'}" in capsys.readouterr().err


def test_a_seeded_repeating_load_is_served_from_the_cache_and_reported(
    tmp_path_factory, tiny_custom_voice, tmp_path
):
    workdir = tmp_path_factory.mktemp("loadtest-cache-server")
    process = RuntimeProcess(
        workdir,
        tiny_custom_voice,
        *("--max-audio-seconds", str(AUDIO_S), "--max-batch", "4"),
        *("--response-cache-memory-bytes", "1000000"),
    )
    try:
        server = process.wait_ready()
        # The one warm-up request makes the audio; the burst's four are hits.
        done = loadtest(
            *("--url", server.base, "--concurrency", "4", "--utterance-seconds", "1"),
            *("--text-count", "1", "--speech-seed", "3", "--warmup", "1"),
            *("--out", str(tmp_path)),
        )
    finally:
        process.stop()
    assert done.returncode == 0, done.stderr
    burst = json.loads((tmp_path / "loadtest.json").read_text())["burst"]
    assert burst["requests"] == burst["ok"] == 4
    assert burst["cache"] == {"hit-memory": 4}
    assert burst["cache_hit_ttfa_ms"]["p95"] is not None
    assert burst["audio_s"] == pytest.approx(4 * AUDIO_S)
    assert "cache at N=4: hit-memory 4" in done.stdout


def test_voice_agents_stream_text_and_count_ttfa_from_the_first_delta(server, tmp_path):
    """Two levels of agent sessions over two client processes: every utterance's text
    goes out at the token rate, its audio comes back whole, and the JSON keeps each
    utterance's samples."""
    done = loadtest(
        *("--url", server.base, "--protocol", "websocket", "--sessions", "1,3"),
        *("--utterances-per-session", "2", "--reply-chars", "30", "--delta-chars", "4"),
        *("--delta-interval-ms", "20", "--ramp-s", "0.2", "--client-processes", "2"),
        *("--warmup", "1", "--out", str(tmp_path), *LOOSE),
    )
    assert done.returncode == 0, done.stderr
    progress = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(line["event"], line["sessions"]) for line in progress] == [
        ("agents", 1),
        ("agents", 3),
    ]
    result = json.loads((tmp_path / "loadtest.json").read_text())
    assert result["mode"] == "agents" and result["server"]["protocol"] == "websocket"
    assert result["agent_plan"]["client_processes"] == 2
    for level, sessions in zip(result["levels"], (1, 3), strict=True):
        assert level["sessions"] == sessions
        assert level["utterances_planned"] == level["utterances_finished"] == 2 * sessions
        assert level["unfinished_utterances"] == level["sessions_closed_by_server"] == 0
        assert level["ttfa_ms"]["p95"] is not None
    assert sorted((s["sessions"], s["session"]) for s in result["samples"]) == [
        (1, 0),
        (3, 0),
        (3, 1),
        (3, 2),
    ]
    for session in result["samples"]:
        assert session["status"] == 200 and session["error"] is None
        for utterance in session["utterances"]:
            # Deltas of 4 characters 20 ms apart, then the flush: paced, not at once.
            assert utterance["text_chars"] <= 30
            assert utterance["flush_ms"] >= (math.ceil(utterance["text_chars"] / 4) - 1) * 20
            assert utterance["audio_s"] == pytest.approx(AUDIO_S)
            first_audio = utterance["chunks"][0][0]
            assert utterance["ttfa_ms"] == first_audio > 0  # from the first delta


def test_an_utterance_the_server_ends_before_its_flush_leaves_the_session_going(server, tmp_path):
    """--max-audio-seconds ends each utterance (10 frames) long before its 2 s of text are
    sent: the agent still sends the rest and flushes, and the next reply is the next
    utterance (a client that stopped sending at the early end left the server waiting
    for a flush, and the session hung until the idle timeout)."""
    done = loadtest(
        *("--url", server.base, "--protocol", "websocket", "--sessions", "1"),
        *("--utterances-per-session", "3", "--reply-chars", "400", "--delta-chars", "4"),
        *("--delta-interval-ms", "20", "--ramp-s", "0", "--client-processes", "1"),
        *("--warmup", "1", "--out", str(tmp_path), *LOOSE),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "loadtest.json").read_text())
    (level,) = result["levels"]
    assert level["utterances_finished"] == 3
    assert level["unfinished_utterances"] == level["sessions_closed_by_server"] == 0
    (session,) = result["samples"]
    assert session["status"] == 200 and session["error"] is None
    for utterance in session["utterances"]:
        assert utterance["audio_s"] == pytest.approx(AUDIO_S)
        assert utterance["done_ms"] < utterance["flush_ms"]  # ended before its text did
