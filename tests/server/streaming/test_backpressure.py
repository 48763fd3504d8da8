"""Clients that stop reading hold little and not for long: a stream's generation
pauses once `--stream-buffer-seconds` of audio wait for its client, resumes when
the client reads, and a client that takes nothing for `--send-timeout` loses its
connection, its generation and its batch slot (counted as `send_timeout`).

Real HTTP and WebSocket over loopback sockets, so the kernel's and asyncio's flow
control are real: a client that reads nothing is a socket nobody calls recv() on,
with a small receive buffer so the kernel soaks up little of the audio."""

from __future__ import annotations

import base64
import functools
import json
import os
import socket

import httpx
import pytest

from support import polling
from support.live_server import API_KEY, LiveServer, auth, metric_value, speech_body
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.http_protocol import SEND_BUFFER_BYTES
from ttsfleet_runtime.settings import ServerSettings

# Random weights never say EOS: every utterance is AUDIO_S long, unless paused.
AUDIO_S = 16.0
BUFFER_S = 1.0
FRAME_RATE_HZ = 12.5  # the tiny 12 Hz checkpoint
SAMPLE_BYTES_PER_S = 24000 * 2  # raw PCM: s16le mono at 24 kHz
CLIENT_RECEIVE_BUFFER = 4096
# What a stream that nobody reads may make at most: its buffer, a chunk past it
# (the one that crossed it) and one on its way while the pause is applied, the chunk
# its sender holds, asyncio's write buffer (64 KiB high-water mark, plus the write
# that crossed it) and the kernel's socket buffers: the server's, capped (the
# kernel doubles what is set), and the client's small one (doubled too).
CHUNK_S = 8 / FRAME_RATE_HZ
KERNEL_S = (2 * SEND_BUFFER_BYTES + 2 * CLIENT_RECEIVE_BUFFER) / SAMPLE_BYTES_PER_S
MOST_UNREAD_S = BUFFER_S + 3 * CHUNK_S + (64 * 1024 / SAMPLE_BYTES_PER_S + CHUNK_S) + KERNEL_S

# Deadlines for conditions, not timings: the tiny model on a busy CPU can take
# tens of seconds to make the few seconds of audio a pause needs.
wait_for = functools.partial(polling.wait_for, timeout=180, interval=0.05)


def backpressure_server(make_engine, send_timeout_s: float):
    settings = ServerSettings(
        max_audio_seconds=AUDIO_S,
        stream_buffer_seconds=BUFFER_S,
        send_timeout_s=send_timeout_s,
    )
    return LiveServer(make_engine(max_batch=4, max_queue=4), settings, ApiKeys((API_KEY,)))


@pytest.fixture(scope="module")
def cutting_server(make_engine):
    """Clients that read nothing are cut after 1 s."""
    with backpressure_server(make_engine, send_timeout_s=1) as live:
        yield live


@pytest.fixture(scope="module")
def patient_server(make_engine):
    """A send timeout no test reaches: slow readers are paused, never cut."""
    with backpressure_server(make_engine, send_timeout_s=120) as live:
        yield live


def metric(server, name: str, labels: dict | None = None) -> float:
    return metric_value(server.base_url, name, labels)


def frames_total(server) -> float:
    return metric(server, "ttsfleet_frames_total")


def unread_socket(server) -> socket.socket:
    """A TCP connection to the server with a small receive buffer (set before
    connecting, so the window it offers stays small) that the test never reads."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RECEIVE_BUFFER)
    sock.connect(("127.0.0.1", server.port))
    return sock


def send_speech_request(sock: socket.socket, server) -> None:
    data = json.dumps(speech_body(server, stream_format="audio")).encode()
    sock.sendall(
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        + data
    )


def ws_frame(message: dict) -> bytes:
    """One masked text frame, as a client sends it (RFC 6455 5.2)."""
    payload = json.dumps(message).encode()
    mask = os.urandom(4)
    head = bytes([0x81])
    if len(payload) < 126:
        head += bytes([0x80 | len(payload)])
    else:
        head += bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def send_ws_session(sock: socket.socket) -> None:
    """Open a speech WebSocket session and ask for one utterance; read only the
    handshake's answer."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        "GET /v1/audio/speech/stream HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {API_KEY}\r\n\r\n".encode()
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)  # byte by byte: not a byte of the session's messages
    assert answer.startswith(b"HTTP/1.1 101"), answer
    sock.sendall(
        ws_frame({"type": "session.config", "voice": "Vivian"})
        + ws_frame({"type": "text.delta", "text": "Hello there. "})
        + ws_frame({"type": "end"})
    )


def full_audio_bytes() -> int:
    frames = round(AUDIO_S * FRAME_RATE_HZ)
    return frames * 1920 * 2


def speak_and_read_all(server) -> bytes:
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        json=speech_body(server, stream_format="audio"),
        headers=auth(),
        timeout=120,
    )
    assert response.status_code == 200
    return response.content


def open_unread(server, transport: str, count: int) -> list[socket.socket]:
    sockets = [unread_socket(server) for _ in range(count)]
    for sock in sockets:
        if transport == "http":
            send_speech_request(sock, server)
        else:
            send_ws_session(sock)
    return sockets


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_clients_that_read_nothing_pause_a_bounded_backlog_ahead(patient_server, transport):
    server = patient_server
    before = frames_total(server)
    sockets = open_unread(server, transport, 3)
    try:
        wait_for(lambda: metric(server, "ttsfleet_paused_streams") == 3, what="3 paused streams")
        at_pause = frames_total(server)
        made_s = (at_pause - before) / FRAME_RATE_HZ
        assert made_s <= 3 * MOST_UNREAD_S < 3 * AUDIO_S
        assert metric(server, "ttsfleet_active_streams") == 3  # paused in their slots
    finally:
        for sock in sockets:
            sock.close()
    wait_for(lambda: metric(server, "ttsfleet_active_streams") == 0, what="free slots")
    assert metric(server, "ttsfleet_paused_streams") == 0
    # Not a frame more while they waited.
    assert frames_total(server) == at_pause


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_clients_that_read_nothing_are_cut_after_the_send_timeout(cutting_server, transport):
    server = cutting_server
    before = frames_total(server)
    timeouts_before = metric(server, "ttsfleet_errors_total", {"type": "send_timeout"})
    sockets = open_unread(server, transport, 3)
    try:
        wait_for(
            lambda: (
                metric(server, "ttsfleet_errors_total", {"type": "send_timeout"})
                == timeouts_before + 3
            ),
            what="3 send timeouts",
        )
        wait_for(lambda: metric(server, "ttsfleet_active_streams") == 0, what="free slots")
        made_s = (frames_total(server) - before) / FRAME_RATE_HZ
        assert made_s <= 3 * MOST_UNREAD_S
        # The server dropped the connections: the client's next read finds them reset.
        for sock in sockets:
            sock.settimeout(30)
            with pytest.raises(ConnectionResetError):
                while sock.recv(1 << 16):
                    pass
    finally:
        for sock in sockets:
            sock.close()
    route = "/v1/audio/speech" if transport == "http" else "/v1/audio/speech/stream"
    assert metric(server, "ttsfleet_requests_total", {"route": route, "code": "408"}) == 3
    # The freed slots serve the next request in full.
    assert len(speak_and_read_all(server)) == full_audio_bytes()


def test_a_slow_reader_is_paused_then_gets_all_its_audio_beside_a_fast_one(patient_server):
    server = patient_server
    url = server.base_url + "/v1/audio/speech"
    body = speech_body(server, stream_format="audio")
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", url, json=body, headers=auth()) as slow,
    ):
        assert slow.status_code == 200
        received = slow.iter_bytes()
        audio = next(received)
        # It reads no more for now: its generation pauses, a buffer ahead of it ...
        wait_for(lambda: metric(server, "ttsfleet_paused_streams") == 1, what="a paused stream")
        # ... while a reader that keeps up gets all of its audio meanwhile.
        assert len(speak_and_read_all(server)) == full_audio_bytes()
        assert metric(server, "ttsfleet_paused_streams") == 1
        # Reading again resumes it, to the end.
        for data in received:
            audio += data
    assert len(audio) == full_audio_bytes()
    assert metric(server, "ttsfleet_paused_streams") == 0
    assert metric(server, "ttsfleet_errors_total", {"type": "send_timeout"}) == 0
