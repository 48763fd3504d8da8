"""The openai SDK works unchanged against the server, and the audio decodes.

Streaming is the default, as in OpenAI's API: a plain
`with_streaming_response.create(...)` gets audio while it is generated, judged
by the engine's own progress, not by a clock: the first piece must reach the
client when the engine has generated only part of the utterance's frames.
"""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import openai
import pytest

from support.live_server import API_KEY, LiveServer, auth
from support.speech_audio import SAMPLE_RATE, decode
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

SAMPLES_PER_FRAME = 1920
# 100 codec frames at 12.5 Hz: the first chunk (2 frames) is far from the end.
LONG_AUDIO_S = 8.0


@pytest.fixture(scope="module")
def long_server(make_engine):
    with LiveServer(
        make_engine(), ServerSettings(max_audio_seconds=LONG_AUDIO_S), ApiKeys((API_KEY,))
    ) as live:
        yield live


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "opus"])
def test_whole_file_on_request_in_every_format_decodes_to_the_spoken_audio(
    openai_client, model_id, fmt
):
    response = openai_client.audio.speech.create(
        model=model_id,
        voice="Vivian",
        input="Hello there",
        response_format=fmt,
        extra_body={"stream_format": "file"},
    )
    samples = decode(response.content, fmt)
    duration = float(response.response.headers["X-Audio-Duration"])
    # mp3 pads the stream with encoder delay; the other codecs are sample-exact.
    assert abs(len(samples) / SAMPLE_RATE - duration) < (0.1 if fmt == "mp3" else 1e-3)
    assert np.abs(samples).max() > 0.01
    assert response.response.headers["content-length"] == str(len(response.content))


def test_whole_wav_states_its_true_length_in_the_header(openai_client, model_id):
    data = openai_client.audio.speech.create(
        model=model_id,
        voice="Vivian",
        input="Hi",
        response_format="wav",
        extra_body={"stream_format": "file"},
    ).content
    assert int.from_bytes(data[40:44], "little") == len(data) - 44


def test_flac_cannot_stream_so_it_is_a_whole_file_by_default(openai_client, model_id):
    response = openai_client.audio.speech.create(
        model=model_id, voice="Vivian", input="Hi", response_format="flac"
    )
    assert response.response.headers["content-length"] == str(len(response.content))
    assert len(decode(response.content, "flac")) / SAMPLE_RATE == pytest.approx(
        float(response.response.headers["X-Audio-Duration"]), abs=1e-3
    )


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus"])
def test_explicit_audio_stream_arrives_in_pieces_and_decodes(openai_client, model_id, fmt):
    with openai_client.audio.speech.with_streaming_response.create(
        model=model_id,
        voice="Ryan",
        input="Streaming speech, piece by piece",
        response_format=fmt,
        extra_body={"stream_format": "audio"},
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        assert "ttfa;dur=" in response.headers["server-timing"]
        pieces = list(response.iter_bytes())
    samples = decode(b"".join(pieces), fmt)
    assert len(samples) > 0.5 * SAMPLE_RATE
    assert np.abs(samples).max() > 0.01


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus"])
def test_plain_streaming_request_gets_audio_before_generation_ends(long_server, fmt):
    client = openai.OpenAI(
        base_url=long_server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120
    )

    def frames():
        return long_server.engine.stats().frames_total

    before = frames()
    with client.audio.speech.with_streaming_response.create(
        model=long_server.runtime.served_models[0],
        voice="Ryan",
        input="Streaming by default",
        response_format=fmt,
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in response.headers
        pieces = response.iter_bytes()
        first = next(pieces)
        generated_at_first_piece = frames() - before
        data = first + b"".join(pieces)
    generated = frames() - before

    assert 0 < generated_at_first_piece < generated
    if fmt == "wav":  # a streaming header: sizes unknown when it was sent
        assert data[4:8] == data[40:44] == b"\xff\xff\xff\xff"
    samples = decode(data, fmt)
    # mp3 adds encoder delay and frame padding; the others are sample-exact.
    expected = generated * SAMPLES_PER_FRAME
    assert abs(len(samples) - expected) <= (0.1 * SAMPLE_RATE if fmt == "mp3" else 0)
    assert np.abs(samples).max() > 0.01


def test_sse_stream_carries_base64_deltas_then_done(server, model_id):
    body = {
        "model": model_id,
        "voice": "Vivian",
        "input": "Events please",
        "response_format": "pcm",
        "stream_format": "sse",
    }
    with httpx.stream(
        "POST", server.base_url + "/v1/audio/speech", json=body, headers=auth()
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[len("data: ") :])
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2
    assert events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["output_tokens"] > 0
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(pcm) / 2 / SAMPLE_RATE == pytest.approx(events[-1]["audio_seconds"], abs=1e-3)


def test_every_response_carries_a_request_id_and_a_given_one_is_kept(server, model_id):
    body = {"model": model_id, "voice": "Vivian", "input": "Hi", "response_format": "pcm"}
    given = httpx.post(
        server.base_url + "/v1/audio/speech",
        json=body,
        headers={**auth(), "X-Request-Id": "trace-123"},
    )
    fresh = httpx.post(server.base_url + "/v1/audio/speech", json=body, headers=auth())
    assert given.headers["x-request-id"] == "trace-123"
    assert fresh.headers["x-request-id"].startswith("req_")


def test_models_lists_the_served_model_with_its_voices(openai_client, model_id):
    models = openai_client.models.list().data
    assert [m.id for m in models] == [model_id]
    assert "wav" in models[0].model_extra["response_formats"]


def test_voice_names_match_case_insensitively(openai_client, model_id):
    data = openai_client.audio.speech.create(
        model=model_id, voice="vIVIAN", input="Hi", response_format="pcm"
    ).content
    assert len(data) > 0
