"""Uploads that could never be spoken are refused at upload, over HTTP, by servers over
the real tiny Base engines at 12 and 25 Hz: the encoders' own output is checked, and
the cloned voice goes through the checks every later speech request would make. A
refusal stores nothing, so it counts nothing against the tenant's quota. A stored
voice read back with a reference mel no upload can make is refused, not spoken."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
import soundfile

from support.live_server import API_KEY, auth
from support.voice_uploads import upload, uploaded_voice_ids
from ttsfleet_runtime.engine.api import ClonedVoice, InvalidRequest
from ttsfleet_runtime.model.prompt import MAX_REF_MEL_FRAMES
from ttsfleet_runtime.server.voice_store_local import PROMPT_FILE

RATE = 24_000  # the tiny checkpoints' sample rate: uploads at it are not resampled


def tone(seconds: float = 2.0, scale: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * scale * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


def float_wav(samples: np.ndarray) -> bytes:
    """A 32-bit float WAV: unlike integer PCM it carries samples past full scale."""
    out = io.BytesIO()
    soundfile.write(out, samples, RATE, format="WAV", subtype="FLOAT")
    return out.getvalue()


@pytest.fixture
def voices_dir(base_server):
    """The server's voices folder, emptied of what earlier tests of the module stored."""
    for voice_id in uploaded_voice_ids(base_server.base_url, API_KEY):
        httpx.delete(base_server.base_url + f"/v1/audio/voices/{voice_id}", headers=auth())
    return base_server.runtime.settings.voices_dir


def stored_nothing(server, voices_dir) -> bool:
    visible = [p for p in voices_dir.iterdir() if not p.name.startswith(".")]
    return visible == [] and uploaded_voice_ids(server.base_url, API_KEY) == []


def speak(server, voice_id: str) -> httpx.Response:
    body = {
        "model": server.runtime.served_models[0],
        "input": "Hello",
        "voice": voice_id,
        "response_format": "pcm",
        "stream_format": "file",
    }
    return httpx.post(server.base_url + "/v1/audio/speech", json=body, headers=auth(), timeout=60)


def test_a_recording_scaled_far_past_full_scale_is_refused(base_server, voices_dir):
    response = upload(base_server.base_url, float_wav(tone(scale=1e30)), API_KEY)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "audio" and "full scale" in error["message"]
    assert stored_nothing(base_server, voices_dir)


def test_the_engine_refuses_a_recording_whose_embedding_is_not_finite(base_server):
    # Behind the server's peak check: the encoders' output itself is checked.
    with pytest.raises(InvalidRequest) as refused:
        base_server.engine.clone_voice(tone(scale=1e30), RATE, "Hello, this is my voice.")
    assert refused.value.param == "audio" and "not finite" in str(refused.value)


def test_a_good_upload_is_stored_and_spoken(base_server, voices_dir):
    created = upload(base_server.base_url, float_wav(tone()), API_KEY)
    assert created.status_code == 201, created.text
    spoken = speak(base_server, created.json()["id"])
    assert spoken.status_code == 200, spoken.text
    assert len(spoken.content) > 0


def test_a_transcript_longer_than_the_recordings_frames_is_refused(base_server, voices_dir):
    # 1.2 s is 15 frames at 12.5 Hz, 30 at 25 Hz. These 59 characters pass the server's
    # speech-rate bound (68 for 1.2 s) but are more tokens than frames, for which every
    # request speaking the voice would be refused: so the upload is.
    transcript = "Quixotic zephyrs vex bold jackdaws; sphinx of black quartz!"
    frames = 1.2 * base_server.engine.info.frame_rate_hz
    assert len(base_server.engine.builder.text_ids(transcript)) > frames
    response = upload(
        base_server.base_url, float_wav(tone(seconds=1.2)), API_KEY, transcript=transcript
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "transcript" and "tokens for" in error["message"]
    assert stored_nothing(base_server, voices_dir)


@pytest.mark.parametrize("base_server", [25], indirect=True, ids=["25hz"])
def test_a_stored_reference_mel_past_the_bound_is_refused_when_spoken(base_server, voices_dir):
    # Only a 25 Hz voice carries a reference mel.
    voice_id = upload(base_server.base_url, float_wav(tone()), API_KEY).json()["id"]
    prompt = voices_dir / voice_id / PROMPT_FILE
    stored = ClonedVoice.from_bytes(prompt.read_bytes())
    too_long = np.zeros((MAX_REF_MEL_FRAMES + 1, stored.ref_mel.shape[1]), np.float32)
    prompt.write_bytes(
        ClonedVoice(
            stored.speaker_embedding,
            stored.ref_codes,
            stored.ref_text,
            stored.model,
            stored.xvector,
            too_long,
        ).to_bytes()
    )
    response = speak(base_server, voice_id)
    assert response.status_code == 400, response.text
    assert f"1 to {MAX_REF_MEL_FRAMES} frames" in response.json()["error"]["message"]


def test_a_blank_transcript_is_refused_naming_the_transcript(base_server, voices_dir):
    response = upload(base_server.base_url, float_wav(tone()), API_KEY, transcript=" \n\t ")
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "transcript"
    assert stored_nothing(base_server, voices_dir)
