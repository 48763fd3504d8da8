"""Connections that hold the server without finishing a request: a head that
never ends, a body that never comes, headers of a megabyte. Each is answered
(OpenAI's error shape) and closed, on raw sockets as such clients behave."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from support.live_server import API_KEY, SHORT_AUDIO_S, LiveServer, auth
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

HEAD_S = 1.0
BODY_S = 1.0


@pytest.fixture(scope="module")
def impatient_server(make_engine):
    settings = ServerSettings(
        http_header_timeout_s=HEAD_S,
        http_body_timeout_s=BODY_S,
        http_keep_alive_s=1.0,
        max_audio_seconds=SHORT_AUDIO_S,
    )
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY,))) as live:
        yield live


def answer_of(sock: socket.socket) -> tuple[int, dict]:
    """Read until the server closes; the status and the JSON body of its answer."""
    sock.settimeout(30)  # far beyond the server's deadlines: a hang fails, it is not waited out
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def test_a_head_that_never_ends_gets_408_and_the_connection_closes(impatient_server):
    with connect(impatient_server) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # ... and nothing more
        status, body = answer_of(sock)
    assert status == 408
    assert body["error"]["code"] == "request_timeout"


def test_a_silent_connection_is_closed_too(impatient_server):
    with connect(impatient_server) as sock:
        status, _ = answer_of(sock)
    assert status == 408


def test_a_body_that_never_comes_gets_408(impatient_server):
    with connect(impatient_server) as sock:
        sock.sendall(
            f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            'Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{"model": '.encode()
        )
        status, body = answer_of(sock)
    assert status == 408
    assert body["error"]["code"] == "request_timeout" and "body" in body["error"]["message"]


def test_a_megabyte_of_headers_is_refused_with_431(server):
    response = httpx.get(
        server.base_url + "/v1/models", headers={**auth(), "X-Big": "a" * 1024 * 1024}
    )
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "headers_too_large"


def test_a_malformed_request_gets_the_error_shape(server):
    with connect(server) as sock:
        sock.sendall(b"NOT A REQUEST\r\n\r\n")
        status, body = answer_of(sock)
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"


def test_ordinary_requests_still_pass_and_keep_alive(impatient_server):
    with httpx.Client(base_url=impatient_server.base_url, headers=auth()) as client:
        assert [client.get("/v1/models").status_code for _ in range(3)] == [200, 200, 200]
