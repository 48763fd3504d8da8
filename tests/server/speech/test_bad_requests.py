"""Each bad speech request gets a 4xx naming what is wrong, in OpenAI's error shape."""

from __future__ import annotations

import httpx
import openai
import pytest

from support.live_server import auth


def speech(server, body=None, **kwargs):
    return httpx.post(server.base_url + "/v1/audio/speech", json=body, headers=auth(), **kwargs)


def good(model_id, **fields):
    return {"model": model_id, "input": "Hello", "voice": "Vivian", "response_format": "pcm", **fields}


@pytest.mark.parametrize(
    ("fields", "param", "fragment"),
    [
        ({"speed": 1.5}, "speed", "speed"),
        ({"voice": "alloy"}, "voice", "built-in voices: "),
        ({"temperature": -1}, "temperature", "greater than or equal"),
        ({"top_p": 0}, "top_p", "greater than"),
        ({"response_format": "aac"}, "response_format", "Input should be"),
        ({"stream_format": "video"}, "stream_format", "Input should be"),
        ({"response_format": "flac", "stream_format": "audio"}, "response_format", "cannot be streamed"),
        ({"input": ""}, "input", "at least 1 character"),
        ({"input": "x" * 501}, "input", "longer than 500"),
        ({"shout": True}, "shout", "Extra inputs"),
        ({"voice": "voice_0123456789abcdef"}, "voice", "unknown voice"),
    ],
)
def test_bad_field_is_refused_with_400_naming_it(server, model_id, fields, param, fragment):
    response = speech(server, good(model_id, **fields))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"


def test_unknown_model_is_404_model_not_found(server, model_id):
    response = speech(server, good(model_id, model="tts-1"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert model_id in response.json()["error"]["message"]


def test_body_that_is_not_json_is_400(server):
    response = httpx.post(
        server.base_url + "/v1/audio/speech", content=b'{"model": ', headers={**auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


def test_body_over_the_limit_is_413_before_it_is_read(server, model_id):
    response = speech(server, good(model_id, input="x" * 20_000))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


def test_chunked_body_over_the_limit_is_413(server, model_id):
    def chunks():
        yield b'{"model": "m", "input": "'
        for _ in range(40):
            yield b"x" * 1024
        yield b'"}'

    response = httpx.post(
        server.base_url + "/v1/audio/speech", content=chunks(), headers={**auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 413


def test_sdk_raises_its_bad_request_error(openai_client, model_id):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.audio.speech.create(model=model_id, voice="Vivian", input="Hi", speed=2.0)
    assert "speed" in str(caught.value)
