"""A full queue refuses at once with 429 + Retry-After; a client that leaves
frees its batch slot and is counted as such."""

from __future__ import annotations

import functools
import json
import socket

import httpx
import pytest

from support import polling
from support.live_server import API_KEY, LiveServer, auth, metric_value, speech_body
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


@pytest.fixture(scope="module")
def slow_server(make_engine):
    """One batch slot, one queue place, utterances of 40 s of audio (~15 s of CPU)."""
    engine = make_engine(max_batch=1, max_queue=1)
    with LiveServer(engine, ServerSettings(max_audio_seconds=40), ApiKeys((API_KEY,))) as live:
        yield live


# The queue and stream gauges move within milliseconds: poll them often.
wait_for = functools.partial(polling.wait_for, timeout=20, interval=0.05)


body = functools.partial(speech_body, input="Hello")


def open_raw_request(server, payload: dict) -> socket.socket:
    """Send a speech request on a bare socket; closing it is a client leaving."""
    data = json.dumps(payload).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_full_queue_is_429_with_retry_after_and_leaving_clients_free_their_slots(slow_server):
    url = slow_server.base_url + "/v1/audio/speech"
    with (
        httpx.Client(timeout=30) as first,
        first.stream(
            "POST", url, json=body(slow_server, stream_format="audio"), headers=auth()
        ) as streaming,
    ):
        audio = streaming.iter_bytes()
        next(audio)  # generating: holds the only slot
        queued = open_raw_request(slow_server, body(slow_server))
        wait_for(lambda: metric_value(slow_server.base_url, "ttsfleet_queue_depth") == 1)

        refused = httpx.post(url, json=body(slow_server), headers=auth())
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "queue_full"
        assert int(refused.headers["retry-after"]) >= 1
        queued.close()  # the queued client gives up: its place is freed
        wait_for(lambda: metric_value(slow_server.base_url, "ttsfleet_queue_depth") == 0)
        assert metric_value(slow_server.base_url, "ttsfleet_active_streams") == 1
        # leaving the `with` closed the streaming response mid-stream
    wait_for(lambda: metric_value(slow_server.base_url, "ttsfleet_active_streams") == 0)
    wait_for(lambda: metric_value(slow_server.base_url, "ttsfleet_queue_depth") == 0)
    assert metric_value(slow_server.base_url, "ttsfleet_errors_total", {"type": "queue_full"}) == 1
    assert (
        metric_value(slow_server.base_url, "ttsfleet_errors_total", {"type": "client_disconnect"})
        == 2
    )
    assert (
        metric_value(
            slow_server.base_url,
            "ttsfleet_requests_total",
            {"route": "/v1/audio/speech", "code": "499"},
        )
        == 2
    )
    # The slot really is free: the next request is admitted and generating.
    with httpx.stream(
        "POST", url, json=body(slow_server, stream_format="audio"), headers=auth(), timeout=30
    ) as again:
        assert again.status_code == 200
        assert next(again.iter_bytes())


def test_client_leaving_a_whole_file_request_cancels_generation(slow_server):
    before = metric_value(
        slow_server.base_url, "ttsfleet_errors_total", {"type": "client_disconnect"}
    )
    with open_raw_request(slow_server, body(slow_server)):
        wait_for(lambda: metric_value(slow_server.base_url, "ttsfleet_active_streams") == 1)
    wait_for(lambda: metric_value(slow_server.base_url, "ttsfleet_active_streams") == 0, timeout=5)
    wait_for(
        lambda: (
            metric_value(
                slow_server.base_url, "ttsfleet_errors_total", {"type": "client_disconnect"}
            )
            == before + 1
        )
    )
