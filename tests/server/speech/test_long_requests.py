"""Long inputs over the real tiny engine: a long text is spoken (in pieces) and
never cuts anyone else's stream; what can never be served is a 4xx naming the
parameter, before or instead of audio, for that client alone."""

from __future__ import annotations

import functools
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from support.live_server import API_KEY, LiveServer, auth, speech_body
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

AUDIO_S = 4.0  # 50 frames an utterance: bystanders are still speaking when the long one comes
BYTES_PER_UTTERANCE = 50 * 1920 * 2  # s16le
LONG_INPUT = "a " * 1100  # 1,101 tokens: more than one utterance's 1,024


@pytest.fixture(scope="module")
def roomy_server(make_engine):
    settings = ServerSettings(max_audio_seconds=AUDIO_S, max_input_chars=4096)
    with LiveServer(make_engine(max_batch=8, max_queue=8), settings, ApiKeys((API_KEY,))) as live:
        yield live


body = functools.partial(speech_body, input="Hello there.", stream_format="audio")


def speak(server, started: threading.Barrier | None = None, **fields) -> tuple[int, int]:
    """One streamed request -> (status, audio bytes); waits at `started` after its first bytes."""
    received = 0
    with (
        httpx.Client(timeout=120) as client,
        client.stream(
            "POST",
            server.base_url + "/v1/audio/speech",
            json=body(server, **fields),
            headers=auth(),
        ) as response,
    ):
        for data in response.iter_bytes():
            if received == 0 and started is not None:
                started.wait(timeout=60)
            received += len(data)
        return response.status_code, received


def test_a_long_input_is_spoken_while_five_bystanders_finish_their_streams(roomy_server):
    bystanders_speaking = threading.Barrier(6)
    with ThreadPoolExecutor(5) as pool:
        bystanders = [
            pool.submit(speak, roomy_server, bystanders_speaking, seed=i) for i in range(5)
        ]
        bystanders_speaking.wait(timeout=60)
        long_status, long_bytes = speak(roomy_server, input=LONG_INPUT)
        results = [b.result(timeout=120) for b in bystanders]
    assert results == [(200, BYTES_PER_UTTERANCE)] * 5
    # Random weights never say EOS: the long one runs to the server's length limit.
    assert (long_status, long_bytes) == (200, BYTES_PER_UTTERANCE)


def test_instructions_beyond_the_prompt_limit_are_a_400_naming_them(roomy_server):
    response = httpx.post(
        roomy_server.base_url + "/v1/audio/speech",
        headers=auth(),
        timeout=30,
        json=body(roomy_server, instructions="speak slowly " * 300, stream_format=None),
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "instructions" and "instructions are too long" in error["message"]


def test_a_streamed_utterance_beyond_the_limit_ends_only_that_session(roomy_server):
    bystander_speaking = threading.Barrier(2)
    with ThreadPoolExecutor(1) as pool:
        bystander = pool.submit(speak, roomy_server, bystander_speaking)
        bystander_speaking.wait(timeout=60)
        url = roomy_server.ws_url + "/v1/audio/speech/stream"
        with connect(
            url, additional_headers={"Authorization": f"Bearer {API_KEY}"}, open_timeout=10
        ) as ws:
            ws.send(json.dumps({"type": "session.config", "voice": "Vivian"}))
            assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
            for _ in range(11):
                ws.send(json.dumps({"type": "text.delta", "text": "a " * 100}))
            events = []
            try:
                while True:
                    message = ws.recv(timeout=60)
                    if isinstance(message, str):
                        events.append(json.loads(message))
            except ConnectionClosed:
                pass
        error = events[-1]
        assert error["code"] == "invalid_request" and "at most 1024 text tokens" in error["message"]
        assert ws.close_code == 1008
        assert bystander.result(timeout=120) == (200, BYTES_PER_UTTERANCE)
