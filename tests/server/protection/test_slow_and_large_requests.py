"""Connections that hold the server without finishing a request: a head that
never ends, a body that never comes, headers of a megabyte. Each is answered
(OpenAI's error shape) and closed, on raw sockets as such clients behave.
Every test runs with both HTTP/1.1 parsers the server may use (http_protocol.py)."""

from __future__ import annotations

import json
import socket
import sys
import time

import httpx
import pytest

from support.live_server import API_KEY, SHORT_AUDIO_S, LiveServer, auth, guarded_protocol
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.serve import uvicorn_config
from ttsfleet_runtime.settings import ServerSettings

HEAD_S = 1.0
BODY_S = 1.0
MAX_HEADER_BYTES = 16 * 1024


@pytest.fixture(scope="module", params=["httptools", "h11"])
def impatient_server(request, make_engine):
    settings = ServerSettings(
        http_header_timeout_s=HEAD_S,
        http_body_timeout_s=BODY_S,
        http_keep_alive_s=1.0,
        max_header_bytes=MAX_HEADER_BYTES,
        max_audio_seconds=SHORT_AUDIO_S,
    )
    http = guarded_protocol(request.param, settings)
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY,)), http=http) as live:
        yield live


def answer_of(sock: socket.socket) -> tuple[int, dict]:
    """Read until the server closes; the status and the JSON body of its answer."""
    sock.settimeout(30)  # far beyond the server's deadlines: a hang fails, it is not waited out
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def response_of(sock: socket.socket) -> bytes:
    """One response with a Content-Length, the connection left open."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(v for k, _, v in _fields(head) if k == b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def _fields(head: bytes):
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        yield name.strip().lower(), sep, value.strip()


def auth_line() -> bytes:
    return f"Authorization: Bearer {API_KEY}\r\n".encode()


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


def test_a_head_that_pauses_after_a_keep_alive_request_gets_408(impatient_server):
    with connect(impatient_server) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth_line() + b"\r\n")
        assert response_of(sock).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # ... and nothing more
        status, body = answer_of(sock)
    assert status == 408
    assert body["error"]["code"] == "request_timeout"


def test_a_megabyte_of_headers_is_refused_with_431(impatient_server):
    response = httpx.get(
        impatient_server.base_url + "/v1/models",
        headers={**auth(), "X-Big": "a" * 1024 * 1024},
    )
    assert response.status_code == 431
    assert response.json()["error"]["code"] == "headers_too_large"


def test_headers_over_the_limit_sent_in_pieces_are_refused_with_431(impatient_server):
    with connect(impatient_server) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
        # Just past the limit, a read each (well within the head's deadline): the server
        # has read everything when it refuses, so it closes without a reset.
        for i in range(MAX_HEADER_BYTES // 1024 + 1):
            sock.sendall(f"X-Piece-{i:02}: {'a' * 1010}\r\n".encode())
            time.sleep(0.02)
        status, body = answer_of(sock)
    assert status == 431
    assert body["error"]["code"] == "headers_too_large"


def test_headers_under_the_limit_pass(impatient_server):
    headers = {**auth(), "X-Fill": "a" * (MAX_HEADER_BYTES - 1024)}
    response = httpx.get(impatient_server.base_url + "/v1/models", headers=headers)
    assert response.status_code == 200


def test_a_body_larger_than_the_head_limit_is_not_counted_as_the_next_head(impatient_server):
    body = b'{"input": "' + b"a" * (2 * MAX_HEADER_BYTES) + b'"}'
    with httpx.Client(base_url=impatient_server.base_url, headers=auth()) as client:
        assert client.post("/v1/audio/speech", content=body).status_code == 400  # model missing
        assert client.get("/v1/models").status_code == 200


def test_a_malformed_request_gets_the_error_shape(impatient_server):
    with connect(impatient_server) as sock:
        sock.sendall(b"NOT A REQUEST\r\n\r\n")
        status, body = answer_of(sock)
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"


def test_ordinary_requests_still_pass_and_keep_alive(impatient_server):
    with httpx.Client(base_url=impatient_server.base_url, headers=auth()) as client:
        assert [client.get("/v1/models").status_code for _ in range(3)] == [200, 200, 200]


def test_the_server_parses_with_httptools_where_it_imports():
    config = uvicorn_config(None, ServerSettings())
    assert config.http.__name__ == "GuardedHttpToolsProtocol"


def test_the_server_falls_back_to_h11_without_httptools(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "httptools", None)
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    with caplog.at_level("INFO", logger="ttsfleet_runtime.server.http_protocol"):
        config = uvicorn_config(None, ServerSettings())
    assert config.http.__name__ == "GuardedH11Protocol"
    assert "HTTP/1.1 parser: h11" in caplog.text
