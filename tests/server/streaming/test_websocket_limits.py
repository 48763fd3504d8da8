"""A WebSocket session must not hold the pod for nothing: idle sessions close,
stalled utterances give their batch slot back, one key holds a bounded number
of sessions, and frames outside the protocol close with a reason."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from support.live_server import API_KEY, OTHER_KEY, SHORT_AUDIO_S, LiveServer, auth, metric_value
from support.polling import wait_for
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

IDLE_S = 1.5
STALL_S = 0.5


@pytest.fixture(scope="module")
def guarded_server(make_engine):
    """One batch slot, short idle and stall timeouts, two sessions per key."""
    settings = ServerSettings(
        max_audio_seconds=SHORT_AUDIO_S,
        ws_idle_timeout_s=IDLE_S,
        ws_text_stall_s=STALL_S,
        ws_max_sessions_per_key=2,
    )
    with LiveServer(
        make_engine(max_batch=1, max_queue=4), settings, ApiKeys((API_KEY, OTHER_KEY))
    ) as live:
        yield live


def open_session(server, key=API_KEY):
    return connect(
        server.ws_url + "/v1/audio/speech/stream",
        additional_headers={"Authorization": f"Bearer {key}"},
        open_timeout=10,
    )


def configure(ws) -> dict:
    ws.send(json.dumps({"type": "session.config", "voice": "Vivian"}))
    return json.loads(ws.recv(timeout=10))


def messages_until_closed(ws, timeout=30) -> list:
    out = []
    try:
        while True:
            message = ws.recv(timeout=timeout)
            out.append(message if isinstance(message, bytes) else json.loads(message))
    except ConnectionClosed:
        pass
    return out


def events(messages) -> list[dict]:
    return [m for m in messages if isinstance(m, dict)]


@pytest.mark.parametrize("after_config", [False, True])
def test_a_binary_frame_closes_1003_with_a_reason(server, after_config):
    with open_session(server) as ws:
        if after_config:
            assert configure(ws)["type"] == "session.ready"
        ws.send(b"\x00\x01binary")
        messages = messages_until_closed(ws)
        assert events(messages)[-1]["code"] == "protocol_error"
        assert ws.close_code == 1003
        assert "binary frames" in ws.close_reason


def test_an_idle_session_is_closed_with_a_reason(guarded_server):
    with open_session(guarded_server) as ws:
        assert configure(ws)["type"] == "session.ready"
        messages = messages_until_closed(ws)  # the client says nothing
        assert events(messages)[-1]["code"] == "idle_timeout"
        assert ws.close_code == 1008
        assert "no message for" in ws.close_reason


def test_a_session_that_goes_quiet_mid_utterance_gives_its_slot_back(guarded_server):
    """One batch slot: while a quiet session held it, nobody else was served."""
    with open_session(guarded_server) as ws:
        assert configure(ws)["type"] == "session.ready"
        ws.send(json.dumps({"type": "text.delta", "text": "A sentence that never"}))  # and no flush
        wait_for(
            lambda: guarded_server.engine.stats().active == 1,
            timeout=20,
            interval=0.05,
            what="a slot held",
        )
        speech = httpx.post(
            guarded_server.base_url + "/v1/audio/speech",
            headers=auth(OTHER_KEY),
            timeout=30,
            json={
                "model": guarded_server.runtime.served_models[0],
                "voice": "Ryan",
                "input": "Me too",
                "response_format": "pcm",
            },
        )
        assert speech.status_code == 200 and len(speech.content) == SHORT_AUDIO_S * 24000 * 2
        messages = messages_until_closed(ws)
    kinds = [e["type"] for e in events(messages)]
    # What it had sent was spoken; then the quiet session was closed.
    assert "utterance.done" in kinds and kinds[-1] == "error"
    assert events(messages)[-1]["code"] == "idle_timeout"


def test_one_key_holds_a_bounded_number_of_sessions(guarded_server):
    with open_session(guarded_server) as first, open_session(guarded_server) as second:
        assert configure(first)["type"] == configure(second)["type"] == "session.ready"
        with open_session(guarded_server) as third:
            refused = messages_until_closed(third)
            assert refused[0]["code"] == "too_many_sessions" and refused[0]["retry_after_s"] >= 1
            assert third.close_code == 1013
        with open_session(guarded_server, OTHER_KEY) as other_key:
            assert configure(other_key)["type"] == "session.ready"
    # Closed sessions give their places back.
    wait_for(
        lambda: not guarded_server.runtime.ws_sessions._open,
        timeout=20,
        interval=0.05,
        what="sessions released",
    )
    with open_session(guarded_server) as again:
        assert configure(again)["type"] == "session.ready"


def test_closed_sessions_are_counted_and_leave_nothing_running(guarded_server):
    wait_for(
        lambda: metric_value(guarded_server.base_url, "ttsfleet_active_streams") == 0,
        timeout=20,
        interval=0.05,
        what="no stream left",
    )
    assert metric_value(guarded_server.base_url, "ttsfleet_errors_total", {"type": "internal"}) == 0


def test_close_codes_follow_the_error_groups_of_the_metrics_catalogue():
    """Try again later (1013) for load, lifecycle and a CUDA OOM; a server failure
    (1011) for the server's other faults; policy (1008) for what the client did."""
    from ttsfleet_runtime import metrics
    from ttsfleet_runtime.server import errors
    from ttsfleet_runtime.server.speech_socket import _close_code

    def close_code(code: str) -> int:
        return _close_code(errors.ApiError(400, "x", code=code))

    assert {c: close_code(c) for c in metrics.CAPACITY_ERRORS} == dict.fromkeys(
        metrics.CAPACITY_ERRORS, 1013
    )
    assert {c: close_code(c) for c in metrics.SERVER_FAULT_ERRORS} == {
        "internal": 1011,
        "engine_error": 1011,
        "cuda_oom": 1013,
    }
    client = set(metrics.CLIENT_FAULT_ERRORS) - {"too_many_sessions"}
    assert {close_code(c) for c in client} == {1008}
    assert close_code("too_many_sessions") == 1013
