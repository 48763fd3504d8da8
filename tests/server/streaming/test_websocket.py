"""WebSocket: text deltas in (as an LLM writes), audio chunks out with timing."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from support.engine_requests import says_eos_after_two_frames
from support.live_server import API_KEY, SHORT_AUDIO_S, LiveServer, metric_value
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


def open_session(server, key=API_KEY, via="header"):
    url = server.ws_url + "/v1/audio/speech/stream"
    if via == "query":
        return connect(url + f"?api_key={key}", open_timeout=10)
    return connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10)


def receive_until_closed(ws):
    """All messages (JSON as dicts, binary as bytes) until the server closes."""
    messages = []
    try:
        while True:
            message = ws.recv(timeout=30)
            messages.append(message if isinstance(message, bytes) else json.loads(message))
    except ConnectionClosed:
        pass
    return messages


def test_incremental_text_becomes_ordered_utterances_of_audio(server):
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian", "seed": 7}))
        ready = json.loads(ws.recv(timeout=10))
        assert ready["type"] == "session.ready" and ready["sample_rate"] == 24000
        for delta in ["Hel", "lo ", "there."]:
            ws.send(json.dumps({"type": "text.delta", "text": delta}))
        ws.send(json.dumps({"type": "flush"}))
        for delta in ["And ", "again."]:
            ws.send(json.dumps({"type": "text.delta", "text": delta}))
        ws.send(json.dumps({"type": "end"}))
        messages = receive_until_closed(ws)
        assert ws.close_code == 1000

    events = [m for m in messages if isinstance(m, dict)]
    assert events[-1] == {"type": "session.done", "utterances": 2}
    done = [e for e in events if e["type"] == "utterance.done"]
    assert [d["utterance"] for d in done] == [0, 1]
    # Every audio header is followed by exactly its samples as s16le.
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message["type"] == "audio":
            assert isinstance(messages[i + 1], bytes)
            assert len(messages[i + 1]) == 2 * message["samples"]
    for utterance in (0, 1):
        headers = [e for e in events if e["type"] == "audio" and e["utterance"] == utterance]
        assert [h["index"] for h in headers] == list(range(len(headers)))
        samples = sum(h["samples"] for h in headers)
        assert samples / 24000 == pytest.approx(done[utterance]["audio_seconds"], abs=1e-3)
        assert done[utterance]["ttfa_ms"] <= done[utterance]["total_ms"]
    pcm = np.frombuffer(b"".join(m for m in messages if isinstance(m, bytes)), dtype="<i2")
    assert np.abs(pcm).max() > 100


def test_browser_style_key_in_the_query_string_works(server):
    with open_session(server, via="query") as ws:
        ws.send(json.dumps({"type": "session.config"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
        ws.send(json.dumps({"type": "end"}))
        assert receive_until_closed(ws)[-1] == {"type": "session.done", "utterances": 0}


@pytest.mark.parametrize(
    ("config", "code", "close_code"),
    [
        ({"type": "session.config", "voice": "nobody"}, "invalid_request", 1008),
        ({"type": "session.config", "temperature": -3}, "invalid_request", 1008),
        ({"type": "session.config", "model": "tts-1"}, "model_not_found", 1008),
        ({"type": "hello"}, "invalid_request", 1008),
    ],
)
def test_bad_config_gets_an_error_message_and_a_close(server, config, code, close_code):
    with open_session(server) as ws:
        ws.send(json.dumps(config))
        messages = receive_until_closed(ws)
        assert messages[0]["type"] == "error" and messages[0]["code"] == code
        assert ws.close_code == close_code


@pytest.mark.parametrize("field", ["voice", "instructions", "language", "model"])
def test_a_lone_surrogate_in_the_config_is_the_clients_error(server, field):
    # json.dumps writes the surrogate as the JSON escape \\ud800, which decodes to
    # a str that is not valid UTF-8: the client's fault, not an engine error.
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config", field: "hi \ud800"}))
        messages = receive_until_closed(ws)
        assert messages[0]["type"] == "error" and messages[0]["code"] == "invalid_request"
        assert ws.close_code == 1008


def test_a_lone_surrogate_in_a_text_delta_is_the_clients_error(server):
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
        ws.send(json.dumps({"type": "text.delta", "text": "hi \ud800"}))
        ws.send(json.dumps({"type": "end"}))
        messages = [m for m in receive_until_closed(ws) if isinstance(m, dict)]
        assert messages[-1]["code"] == "invalid_request"
        assert "surrogate" in messages[-1]["message"]
        assert ws.close_code == 1008


def test_wrong_key_is_refused_with_a_reason(server):
    with open_session(server, key="wrong") as ws:
        messages = receive_until_closed(ws)
        assert messages == [
            {"type": "error", "code": "invalid_api_key", "message": "invalid API key"}
        ]
        assert ws.close_code == 1008


def test_protocol_errors_are_named(server):
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config"}))
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "text.delta", "text": 42}))
        messages = receive_until_closed(ws)
        assert messages[-1]["code"] == "protocol_error"
        assert "text.delta needs a string" in messages[-1]["message"]


def test_leaving_mid_utterance_frees_the_slot(server):
    before = metric_value(server.base_url, "ttsfleet_errors_total", {"type": "client_disconnect"})
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian"}))
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "text.delta", "text": "A sentence that is cut short"}))
        ws.send(json.dumps({"type": "flush"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "audio"
    # closed after the first chunk
    deadline = time.monotonic() + 20
    while (
        metric_value(server.base_url, "ttsfleet_errors_total", {"type": "client_disconnect"})
        < before + 1
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    while metric_value(server.base_url, "ttsfleet_active_streams") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_message_over_the_body_limit_is_refused_with_a_close_handshake(server):
    # 20 KiB against the server's 16 KiB --max-body-bytes. uvicorn's own frame cap used
    # to be that limit: it dropped the connection mid-write (the client saw 1006, and
    # the session's next send raised inside the app).
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
        ws.send(json.dumps({"type": "text.delta", "text": "a" * 20 * 1024}))
        messages = receive_until_closed(ws)
        assert ws.close_code == 1009
    assert [m["code"] for m in messages if isinstance(m, dict) and m["type"] == "error"] == [
        "protocol_error"
    ]


def spoken_utterances(server, texts) -> list[dict]:
    """The `utterance.done` events of one session that says each of `texts` (a flush
    after each)."""
    with open_session(server) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian", "seed": 3}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
        for text in texts:
            ws.send(json.dumps({"type": "text.delta", "text": text}))
            ws.send(json.dumps({"type": "flush"}))
        ws.send(json.dumps({"type": "end"}))
        messages = receive_until_closed(ws)
        assert ws.close_code == 1000
    return [m for m in messages if isinstance(m, dict) and m["type"] == "utterance.done"]


def test_an_utterance_the_audio_cap_cut_says_length(server):
    # Random weights never say EOS: the server's --max-audio-seconds ends each utterance
    # before its text was said, and the client must be able to tell.
    done = spoken_utterances(server, ["A reply far longer than the audio cap lets it be."])
    assert [d["finish_reason"] for d in done] == ["length"]
    assert done[0]["audio_seconds"] == pytest.approx(SHORT_AUDIO_S, abs=0.1)


@pytest.fixture(scope="module")
def eos_server(make_engine):
    """A server whose model says EOS once it has spoken its text (at 2 frames a piece)."""
    engine = make_engine()
    settings = ServerSettings(max_audio_seconds=SHORT_AUDIO_S)
    with LiveServer(engine, settings, ApiKeys((API_KEY,))) as live:
        says_eos_after_two_frames(engine)  # the model is loaded once the server started
        yield live


def test_an_utterance_said_to_its_end_says_stop(eos_server):
    done = spoken_utterances(eos_server, ["Hello there.", "And again."])
    assert [d["finish_reason"] for d in done] == ["stop", "stop"]
    assert all(d["audio_seconds"] < SHORT_AUDIO_S for d in done)
