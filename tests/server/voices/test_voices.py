"""Uploaded voices: consent, checks with reasons, per-caller visibility, erasure."""

from __future__ import annotations

import json

import httpx
import pytest

from support import voice_uploads
from support.live_server import API_KEY, OTHER_KEY, auth
from support.voice_uploads import recording, uploaded_voice_ids


@pytest.fixture
def clone_voices(clone_server):
    return clone_server.runtime.settings.voices_dir


def upload(server, audio: bytes, key=None, filename="me.wav", **fields):
    return voice_uploads.upload(server.base_url, audio, key or API_KEY, filename, **fields)


def voice_ids(server, key=None) -> list[str]:
    return uploaded_voice_ids(server.base_url, key or API_KEY)


def test_upload_list_and_erase_a_voice(clone_server, clone_voices):
    server = clone_server
    created = upload(server, recording(fmt="FLAC"), filename="me.flac")
    assert created.status_code == 201, created.text
    voice = created.json()
    assert voice["id"].startswith("voice_") and voice["duration_s"] == pytest.approx(2.0)
    folder = clone_voices / voice["id"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "consent.json",
        "profile.json",
        "prompt.npz",
        "reference.wav",
    ]
    consent = json.loads((folder / "consent.json").read_text())
    assert consent["consent"] is True and consent["given_by"].startswith("key_")
    assert voice["id"] in voice_ids(server)
    # Another key neither sees nor deletes it.
    assert voice["id"] not in voice_ids(server, OTHER_KEY)
    assert (
        httpx.delete(
            server.base_url + f"/v1/audio/voices/{voice['id']}", headers=auth(OTHER_KEY)
        ).status_code
        == 404
    )

    deleted = httpx.delete(server.base_url + f"/v1/audio/voices/{voice['id']}", headers=auth())
    assert deleted.json() == {"id": voice["id"], "object": "voice", "deleted": True}
    assert not folder.exists()
    assert voice["id"] not in voice_ids(server)
    assert (
        httpx.delete(
            server.base_url + f"/v1/audio/voices/{voice['id']}", headers=auth()
        ).status_code
        == 404
    )


def test_builtin_speakers_are_listed(server):
    data = httpx.get(server.base_url + "/v1/audio/voices", headers=auth()).json()["data"]
    builtin = [v["id"] for v in data if v["type"] == "builtin"]
    assert builtin == list(server.engine.info.speakers)


def test_a_model_that_cannot_clone_refuses_uploads_and_uploaded_voices(server, model_id):
    refused = upload(server, recording())
    assert refused.status_code == 400
    assert "cannot clone voices; upload to a Base model" in refused.json()["error"]["message"]
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        json={"model": model_id, "input": "Hi", "voice": "voice_0123456789abcdef"},
        headers=auth(),
    )
    assert response.status_code == 400
    assert "cannot speak uploaded voices" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("audio", "fields", "fragment"),
    [
        (b"RIFF\x00\x00garbage", {}, "could not decode the audio"),
        (b"", {}, "empty"),
        (recording(seconds=0.3), {}, "must last 1 to 30 seconds"),
        (recording(seconds=31, rate=8000, fmt="FLAC"), {}, "must last 1 to 30 seconds"),
        (recording(amplitude=0.0), {}, "silent"),
        (recording(), {"consent": "false"}, "consent must be true"),
        (recording(), {"transcript": ""}, "transcript"),
    ],
)
def test_bad_uploads_are_refused_with_a_reason_and_leave_nothing(
    clone_server, clone_voices, audio, fields, fragment
):
    server = clone_server
    before = sorted(clone_voices.iterdir())
    response = upload(server, audio, **fields)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]["message"]
    assert sorted(clone_voices.iterdir()) == before


def test_upload_over_the_size_limit_is_413(clone_server):
    response = upload(clone_server, recording(seconds=20, rate=48000))  # ~1.9 MB of WAV
    assert response.status_code == 413


def test_consent_field_is_required(clone_server):
    response = httpx.post(
        clone_server.base_url + "/v1/audio/voices",
        files={"audio": ("me.wav", recording(), "audio/wav")},
        data={"transcript": "Hello"},
        headers=auth(),
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "consent"


@pytest.mark.parametrize("consent", ["1", "yes", "on", "True", "TRUE", " true"])
def test_consent_is_only_the_word_true(clone_server, clone_voices, consent):
    response = upload(clone_server, recording(), consent=consent)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "consent"
    assert list(clone_voices.iterdir()) == []


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("consent", ["false", "true"]),
        ("consent", ["true", "true"]),
        ("transcript", ["a", "b"]),
        ("name", ["Alice", "Bob"]),
    ],
)
def test_a_field_sent_twice_is_refused(clone_server, clone_voices, field, values):
    response = upload(clone_server, recording(), **{field: values})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and "more than once" in error["message"]
    assert list(clone_voices.iterdir()) == []


def test_a_file_name_too_long_for_a_voice_name_is_refused(clone_server, clone_voices):
    long_name = "n" * 400 + ".wav"
    refused = upload(clone_server, recording(), filename=long_name, name="")
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "name" and "404 characters" in error["message"]
    assert list(clone_voices.iterdir()) == []
    # A `name` of its own names the voice whatever the file is called.
    named = upload(clone_server, recording(), filename=long_name, name="Alice")
    assert named.status_code == 201 and named.json()["name"] == "Alice"


@pytest.mark.parametrize(
    ("transcript", "fragment"),
    [
        (" \t\n ", "the transcript is blank"),
        # 2 s of audio: at most 40 characters a second plus 20, 100 in all.
        ("word " * 200, "999 characters for 2.0 s of audio"),
        ("x" * 101, "101 characters for 2.0 s of audio"),
    ],
    ids=["whitespace", "far-too-long", "just-over"],
)
def test_a_transcript_that_cannot_be_the_recordings_is_refused(
    clone_server, clone_voices, transcript, fragment
):
    response = upload(clone_server, recording(seconds=2.0), transcript=transcript)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "transcript" and fragment in error["message"]
    assert list(clone_voices.iterdir()) == []


def test_a_transcript_at_the_speech_rate_bound_is_accepted(clone_server):
    response = upload(clone_server, recording(seconds=2.0), transcript="x" * 100)
    assert response.status_code == 201, response.text


def test_a_field_the_upload_does_not_read_may_come_twice(clone_server):
    response = upload(clone_server, recording(), extra=["1", "2"])
    assert response.status_code == 201, response.text


def test_an_audio_file_sent_twice_is_refused(clone_server, clone_voices):
    response = httpx.post(
        clone_server.base_url + "/v1/audio/voices",
        files=[("audio", ("a.wav", recording(), "audio/wav"))] * 2,
        data=voice_uploads.UPLOAD_FIELDS,
        headers=auth(),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "audio"
    assert list(clone_voices.iterdir()) == []
