"""Each bad speech request gets a 4xx naming what is wrong, in OpenAI's error shape."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from support.live_server import auth


def speech(server, body=None, **kwargs):
    return httpx.post(server.base_url + "/v1/audio/speech", json=body, headers=auth(), **kwargs)


def good(model_id, **fields):
    return {
        "model": model_id,
        "input": "Hello",
        "voice": "Vivian",
        "response_format": "pcm",
        **fields,
    }


@pytest.mark.parametrize(
    ("fields", "param", "fragment"),
    [
        ({"speed": 1.5}, "speed", "speed"),
        ({"voice": "alloy"}, "voice", "built-in voices: "),
        ({"temperature": -1}, "temperature", "greater than or equal"),
        ({"top_p": 0}, "top_p", "greater than"),
        ({"response_format": "aac"}, "response_format", "Input should be"),
        ({"stream_format": "video"}, "stream_format", "Input should be"),
        (
            {"response_format": "flac", "stream_format": "audio"},
            "response_format",
            "cannot be streamed",
        ),
        ({"input": ""}, "input", "at least 1 character"),
        ({"input": "x" * 501}, "input", "longer than 500"),
        ({"shout": True}, "shout", "Extra inputs"),
        ({"voice": "voice_0123456789abcdef"}, "voice", "cannot speak uploaded voices"),
    ],
)
def test_bad_field_is_refused_with_400_naming_it(server, model_id, fields, param, fragment):
    response = speech(server, good(model_id, **fields))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("field", ["input", "voice", "instructions", "language", "model"])
def test_a_lone_surrogate_is_the_clients_error_naming_the_field(server, model_id, field):
    # The raw body carries the JSON escape \\ud800: valid JSON, but the string it
    # decodes to is not valid UTF-8 and must not reach the tokenizer (a 500).
    body = json.dumps(good(model_id, **{field: "hi \ud800"}))
    assert "\\ud800" in body
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        content=body,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == field


def test_unknown_model_is_404_model_not_found(server, model_id):
    response = speech(server, good(model_id, model="tts-1"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert model_id in response.json()["error"]["message"]


def test_body_that_is_not_json_is_400(server):
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        content=b'{"model": ',
        headers={**auth(), "Content-Type": "application/json"},
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
        server.base_url + "/v1/audio/speech",
        content=chunks(),
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 413


def test_sdk_raises_its_bad_request_error(openai_client, model_id):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.audio.speech.create(model=model_id, voice="Vivian", input="Hi", speed=2.0)
    assert "speed" in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("speed", "1"),
        ("speed", True),
        ("temperature", "0.5"),
        ("temperature", False),
        ("top_k", 1.5),
        ("top_k", True),
        ("seed", "7"),
        ("input", 5),
        ("input", ["Hello"]),
        ("voice", 1),
        ("model", None),
        ("response_format", 1),
        ("language", {"code": "en"}),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_coerced(server, model_id, field, value):
    response = speech(server, good(model_id, **{field: value}))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == field


def test_an_integer_is_still_a_number(server, model_id):
    assert speech(server, good(model_id, speed=1, temperature=1)).status_code == 200


@pytest.mark.parametrize(
    "content",
    [
        b'{"model": "m", "input": "\xff\xfe"}',  # not UTF-8
        b"[" * 5000 + b"]" * 5000,  # deeper than any JSON parser recurses
        b'{"a":' * 2000 + b"1" + b"}" * 2000,
    ],
)
def test_an_unparsable_body_gets_400_in_the_openai_shape(server, content):
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        content=content,
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert set(response.json()) == {"error"}
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/no-such-thing", 404, "not_found"),
        ("GET", "/v1/audio/speech", 405, "method_not_allowed"),
        ("PUT", "/v1/models", 405, "method_not_allowed"),
        ("GET", "/nowhere", 404, "not_found"),
    ],
)
def test_framework_refusals_have_the_openai_shape_too(server, method, path, status, code):
    response = httpx.request(method, server.base_url + path, headers=auth())
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert "detail" not in response.json()


def test_error_messages_never_show_object_reprs():
    from ttsfleet_runtime.server import errors

    error = errors.invalid_request(
        "Error opening <_io.BytesIO object at 0x7f3a2c1b9e50>: Format not recognised."
    )
    assert "0x" not in error.message and "BytesIO" not in error.message
    assert error.message == "Error opening the data: Format not recognised."


def test_an_undecodable_upload_is_refused_without_internals(server):
    response = httpx.post(
        server.base_url + "/v1/audio/voices",
        headers=auth(),
        files={"audio": ("a.wav", b"RIFF not really audio" * 50, "audio/wav")},
        data={"transcript": "hi", "consent": "true", "consent_statement": "I agree", "name": "x"},
    )
    assert response.status_code == 400
    assert " at 0x" not in response.json()["error"]["message"]
