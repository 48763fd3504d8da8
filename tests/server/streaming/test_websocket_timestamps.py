"""WebSocket alignment messages: a session that asks for timestamps gets the words
of each utterance, timed, before the audio that speaks them; text sent in deltas
cut inside words is timed as the whole text is over HTTP."""

from __future__ import annotations

import json

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from support.live_server import API_KEY, auth, speech_body

TEXT = "Hello there, how are you?"


def session_messages(server, config: dict, deltas: list[str]) -> list:
    url = server.ws_url + "/v1/audio/speech/stream"
    with connect(url, additional_headers=auth(API_KEY), open_timeout=10) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian", **config}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
        for delta in deltas:
            ws.send(json.dumps({"type": "text.delta", "text": delta}))
        ws.send(json.dumps({"type": "end"}))
        messages = []
        try:
            while True:
                message = ws.recv(timeout=30)
                messages.append(message if isinstance(message, bytes) else json.loads(message))
        except ConnectionClosed:
            pass
    return messages


def test_alignment_messages_time_streamed_text_as_the_whole_text(server):
    deltas = [TEXT[i : i + 4] for i in range(0, len(TEXT), 4)]  # cut inside words
    messages = session_messages(server, {"timestamps": True}, deltas)
    events = [m for m in messages if isinstance(m, dict)]
    alignments = [e for e in events if e["type"] == "alignment"]
    assert alignments and all(a["utterance"] == 0 for a in alignments)
    words = [w for a in alignments for w in a["words"]]
    assert "".join(c for a in alignments for c in a["characters"]) == TEXT

    whole = httpx.post(
        server.base_url + "/v1/audio/speech/with-timestamps",
        json=speech_body(server, input=TEXT, stream_format="json"),
        headers=auth(),
        timeout=60,
    ).json()
    assert words == whole["words"]
    # Each alignment message comes before the audio header of its chunk.
    kinds = [e["type"] for e in events]
    assert kinds.index("alignment") < kinds.index("audio")
    # The audio header counts the samples of the binary frame after it.
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message["type"] == "audio":
            assert len(messages[i + 1]) == 2 * message["samples"]


def test_without_timestamps_a_session_gets_no_alignment(server):
    messages = session_messages(server, {}, [TEXT])
    assert not [m for m in messages if isinstance(m, dict) and m["type"] == "alignment"]
