"""A tiny 25 Hz CustomVoice checkpoint served over HTTP (the openai SDK, every
response format) and the WebSocket: the same API as 12 Hz, with the duration cap,
audio lengths and metrics at 25 frames of 960 samples a second."""

from __future__ import annotations

import json

import numpy as np
import openai
import pytest
from websockets.sync.client import connect

from support.live_server import API_KEY, LiveServer, metric_value
from support.speech_audio import SAMPLE_RATE, decode
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

SAMPLES_PER_FRAME = 960
MAX_AUDIO_S = 1.2  # 30 frames at 25 Hz: random weights never say EOS, so every reply is this


@pytest.fixture(scope="module")
def server(tiny_25hz_custom_voice):
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    engine = TTSEngine.from_pretrained(
        str(tiny_25hz_custom_voice), device="cpu", max_batch=4, dtype="float32"
    )
    settings = ServerSettings(max_audio_seconds=MAX_AUDIO_S)
    with LiveServer(engine, settings, ApiKeys((API_KEY,))) as live:
        yield live


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0)


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "opus"])
def test_every_format_speaks_the_duration_cap_at_25_frames_a_second(server, client, fmt):
    response = client.audio.speech.create(
        model=server.runtime.served_models[0],
        voice="Vivian",
        input="Hello there",
        response_format=fmt,
        extra_body={"stream_format": "file"},
    )
    samples = decode(response.content, fmt)
    duration = float(response.response.headers["X-Audio-Duration"])
    assert duration == pytest.approx(MAX_AUDIO_S)  # 30 frames x 960 samples
    assert abs(len(samples) / SAMPLE_RATE - duration) < (0.1 if fmt == "mp3" else 1e-3)
    assert np.abs(samples).max() > 0.01


def test_a_streamed_reply_is_whole_frames_and_counted_in_audio_seconds(server, client):
    before = metric_value(server.base_url, "ttsfleet_audio_seconds_total")
    with client.audio.speech.with_streaming_response.create(
        model=server.runtime.served_models[0],
        voice="Ryan",
        input="Streaming speech",
        response_format="pcm",
    ) as response:
        pieces = list(response.iter_bytes())
    samples = decode(b"".join(pieces), "pcm")
    assert len(samples) == round(MAX_AUDIO_S * 25) * SAMPLES_PER_FRAME
    after = metric_value(server.base_url, "ttsfleet_audio_seconds_total")
    assert after - before == pytest.approx(MAX_AUDIO_S, abs=1e-3)


def test_the_websocket_speaks_utterances_in_order(server):
    url = server.ws_url + "/v1/audio/speech/stream"
    with connect(url, additional_headers={"Authorization": f"Bearer {API_KEY}"}) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": "Vivian", "seed": 7}))
        assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
        for text in ["Hello ", "there."]:
            ws.send(json.dumps({"type": "text.delta", "text": text}))
        ws.send(json.dumps({"type": "flush"}))
        ws.send(json.dumps({"type": "text.delta", "text": "Again."}))
        ws.send(json.dumps({"type": "end"}))
        messages = []
        while True:
            message = ws.recv(timeout=60)
            messages.append(message if isinstance(message, bytes) else json.loads(message))
            if isinstance(messages[-1], dict) and messages[-1]["type"] == "session.done":
                break
    events = [m for m in messages if isinstance(m, dict)]
    done = [e for e in events if e["type"] == "utterance.done"]
    assert [d["utterance"] for d in done] == [0, 1]
    for utterance in (0, 1):
        headers = [e for e in events if e["type"] == "audio" and e["utterance"] == utterance]
        assert [h["index"] for h in headers] == list(range(len(headers)))
        assert sum(h["samples"] for h in headers) == round(MAX_AUDIO_S * 25) * SAMPLES_PER_FRAME
        assert done[utterance]["audio_seconds"] == pytest.approx(MAX_AUDIO_S, abs=1e-3)


def test_a_pod_refuses_a_checkpoint_of_another_rate_than_its_service_names(
    tiny_25hz_custom_voice,
):
    from ttsfleet_runtime.server.serve import build_engine

    settings = ServerSettings(model=str(tiny_25hz_custom_voice), device="cpu")
    assert build_engine(settings).info.tokenizer_rate_hz == 25
    with pytest.raises(ValueError, match="has a 25 Hz speech tokenizer"):
        build_engine(
            ServerSettings(model=str(tiny_25hz_custom_voice), device="cpu", tokenizer_rate_hz=12)
        )
