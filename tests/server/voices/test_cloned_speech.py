"""Speaking cloned voices over HTTP: a stored voice costs no cloning after its upload,
one-shot cloning stores nothing and asks the same consent, refusals name the field,
and an export hands back everything kept of a voice."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
import soundfile

from support.live_server import API_KEY, OTHER_KEY, auth, metric_value
from support.voice_uploads import recording, upload
from support.voices import SPEECH, one_shot, speak
from ttsfleet_runtime import metrics


def clone_seconds_count(server, source: str) -> float:
    return metric_value(server.base_url, metrics.VOICE_CLONE + "_count", {"source": source})


def test_a_stored_voice_is_cloned_once_and_spoken_from_the_cache(clone_server):
    server, engine = clone_server, clone_server.engine
    voice_id = upload(server.base_url, recording(), API_KEY).json()["id"]
    assert engine.clones == 1 and clone_seconds_count(server, "upload") == 1
    first, second = speak(server, voice=voice_id), speak(server, voice=voice_id)
    assert first.status_code == 200, first.text
    assert first.content == second.content and len(first.content) > 0
    assert engine.clones == 1  # speaking costs no encoder work
    lookups = {
        result: metric_value(server.base_url, metrics.VOICE_CACHE_LOOKUPS, {"result": result})
        for result in ("hit", "miss")
    }
    assert lookups == {"hit": 1, "miss": 1}
    # Another tenant's voice does not exist for the caller.
    refused = speak(server, key=OTHER_KEY, voice=voice_id)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "voice"


def test_one_shot_cloning_speaks_the_reference_and_stores_nothing(clone_server):
    server = clone_server
    voices_dir = server.runtime.settings.voices_dir
    response = speak(server, voice="ignored", voice_clone=one_shot())
    assert response.status_code == 200, response.text
    assert clone_seconds_count(server, "request") == 1
    assert list(voices_dir.iterdir()) == []
    # The same reference as an upload is the same voice.
    stored = upload(server.base_url, recording(), API_KEY).json()["id"]
    assert speak(server, voice=stored).content == response.content


def test_one_shot_cloning_through_the_openai_sdk(clone_server):
    import openai

    client = openai.OpenAI(base_url=clone_server.base_url + "/v1", api_key=API_KEY, max_retries=0)
    audio = client.audio.speech.create(
        model=clone_server.runtime.served_models[0],
        voice="clone",
        input="Hello",
        response_format="wav",
        extra_body={"voice_clone": one_shot(), "stream_format": "file"},
    )
    pcm, rate = soundfile.read(io.BytesIO(audio.content))
    assert rate == 24000 and len(pcm) > 0


@pytest.mark.parametrize(
    ("fields", "param", "fragment"),
    [
        ({}, "voice", "no voice: model stand-in-tiny-Base speaks cloned voices only"),
        ({"voice": "Vivian"}, "voice", "unknown voice 'Vivian'"),
        ({"voice": "voice_0123456789abcdef"}, "voice", "unknown voice"),
        ({"voice_clone": one_shot(consent=False)}, "voice_clone.consent", "consent must be true"),
        ({"voice_clone": one_shot(audio="not base64!")}, "voice_clone.audio", "not valid base64"),
        (
            {"voice_clone": one_shot(recording(amplitude=0.0))},
            "voice_clone.audio",
            "silent",
        ),
        ({"voice_clone": {"audio": "AAAA", "consent": True}}, "voice_clone.transcript", "Field"),
        (
            {"voice_clone": one_shot(transcript="  \n ")},
            "voice_clone.transcript",
            "the transcript is blank",
        ),
        (
            {"voice_clone": one_shot(transcript="x" * 200)},
            "voice_clone.transcript",
            "200 characters for 2.0 s of audio",
        ),
    ],
)
def test_a_base_model_refuses_what_it_cannot_speak(clone_server, fields, param, fragment):
    response = speak(clone_server, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and fragment in error["message"]


def test_a_model_that_cannot_clone_refuses_a_one_shot_reference(server, model_id):
    response = httpx.post(
        server.base_url + SPEECH,
        json={"model": model_id, "input": "Hi", "voice": "Vivian", "voice_clone": one_shot()},
        headers=auth(),
    )
    # A body with a recording is over a non-cloning model's body limit already.
    assert response.status_code == 413, response.text
    small = one_shot(b"RIFF")
    response = httpx.post(
        server.base_url + SPEECH,
        json={"model": model_id, "input": "Hi", "voice": "Vivian", "voice_clone": small},
        headers=auth(),
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "voice_clone"


def test_export_returns_audio_transcript_and_consent(clone_server):
    server = clone_server
    sent = recording(seconds=2.0, rate=24000)
    voice = upload(server.base_url, sent, API_KEY, consent_statement="Alice, 1 Nov 2026").json()
    exported = httpx.get(server.base_url + f"/v1/audio/voices/{voice['id']}/export", headers=auth())
    assert exported.status_code == 200, exported.text
    body = exported.json()
    assert body["object"] == "voice.export" and body["voice"]["id"] == voice["id"]
    assert body["transcript"] == "Hello, this is my voice."
    assert body["consent"]["statement"] == "Alice, 1 Nov 2026"
    audio, rate = soundfile.read(io.BytesIO(base64.b64decode(body["audio"]["data"])))
    original, _ = soundfile.read(io.BytesIO(sent))
    assert rate == body["audio"]["sample_rate"] == 24000
    assert np.allclose(audio, original, atol=1e-3)
    assert body["voice"]["expires_at"] is not None  # 30 days by default
    other = httpx.get(
        server.base_url + f"/v1/audio/voices/{voice['id']}/export", headers=auth(OTHER_KEY)
    )
    assert other.status_code == 404


def test_a_websocket_session_speaks_a_stored_voice(clone_server):
    import json

    from websockets.sync.client import connect

    voice_id = upload(clone_server.base_url, recording(), API_KEY).json()["id"]
    url = clone_server.ws_url + "/v1/audio/speech/stream"
    with connect(url, additional_headers=auth()) as ws:
        ws.send(json.dumps({"type": "session.config", "voice": voice_id}))
        assert json.loads(ws.recv())["type"] == "session.ready"
        ws.send(json.dumps({"type": "text.delta", "text": "Hello"}))
        ws.send(json.dumps({"type": "end"}))
        kinds = []
        while (message := ws.recv()) and not (
            isinstance(message, str) and json.loads(message)["type"] == "session.done"
        ):
            kinds.append(json.loads(message)["type"] if isinstance(message, str) else "pcm")
    assert "pcm" in kinds and "utterance.done" in kinds
