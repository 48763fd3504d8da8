"""The cache key covers every field that can change the audio: each field of the engine's
request and of the HTTP body is keyed unless NOT_AUDIO_RELEVANT says why not, so a field
added later is keyed until someone argues it out; and the tenant is in every key."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ttsfleet_runtime.engine import api
from ttsfleet_runtime.server.response_cache import cache_key, wants_cache
from ttsfleet_runtime.server.response_cache.key import NOT_AUDIO_RELEVANT
from ttsfleet_runtime.server.speech_request import SpeechRequest

MODEL = {"checkpoint": "/models/x", "revision": None, "variant": "CustomVoice"}


def request(**fields) -> api.SynthesisRequest:
    return api.SynthesisRequest(**{"text": "Hello", "voice": "Vivian", **fields})


def body(**fields) -> SpeechRequest:
    return SpeechRequest(**{"model": "m", "input": "Hello", "voice": "Vivian", "seed": 1, **fields})


def key(tenant="alice", model=MODEL, voice_id=None, req=None, speech=None):
    return cache_key(
        tenant=tenant,
        model=model,
        voice_id=voice_id,
        request=req or request(),
        body=speech or body(),
    ).digest


def test_only_fields_that_cannot_change_the_audio_are_left_out():
    # Adding a name here is a claim that the field cannot change a byte of the response.
    left_out = {kind: set(fields) for kind, fields in NOT_AUDIO_RELEVANT.items()}
    assert left_out == {
        "SynthesisRequest": {"request_id", "buffer_s", "timestamps", "priority"},
        "SpeechRequest": {"cache"},
    }
    assert all(why for fields in NOT_AUDIO_RELEVANT.values() for why in fields.values())
    synthesis = {f.name for f in dataclasses.fields(api.SynthesisRequest)}
    assert set(NOT_AUDIO_RELEVANT["SynthesisRequest"]) <= synthesis
    assert set(NOT_AUDIO_RELEVANT["SpeechRequest"]) <= set(SpeechRequest.model_fields)


# A value other than the default for every keyed field of the engine's request.
OTHER_SYNTHESIS = {
    "text": "Goodbye",
    "voice": "Ryan",
    "cloned_voice": api.ClonedVoice(speaker_embedding=np.ones(4, np.float32)),
    "instructions": "whisper",
    "language": "english",
    "params": api.SamplingParams(seed=2),
    "sample_format": "s16",
}
OTHER_PARAMS = {
    "temperature": 0.5,
    "top_k": 10,
    "top_p": 0.9,
    "repetition_penalty": 1.2,
    "subtalker_temperature": 0.5,
    "subtalker_top_k": 10,
    "subtalker_top_p": 0.9,
    "seed": 2,
    "max_frames": 100,
    "min_frames": 10,
}
OTHER_BODY = {
    "model": "other",
    "input": "Goodbye",
    "voice": "Ryan",
    "voice_clone": {"audio": "AAAA", "transcript": "hi", "consent": True},
    "response_format": "wav",
    "instructions": "whisper",
    "speed": 2.0,
    "stream_format": "sse",
    "language": "english",
    "temperature": 0.5,
    "top_k": 10,
    "top_p": 0.9,
    "repetition_penalty": 1.2,
    "subtalker_temperature": 0.5,
    "subtalker_top_k": 10,
    "subtalker_top_p": 0.9,
    "seed": 2,
}


def test_every_keyed_field_has_a_case_below():
    # A new field fails here until it gets a value that must change the key.
    synthesis = {f.name for f in dataclasses.fields(api.SynthesisRequest)}
    assert synthesis - set(NOT_AUDIO_RELEVANT["SynthesisRequest"]) == set(OTHER_SYNTHESIS)
    assert {f.name for f in dataclasses.fields(api.SamplingParams)} == set(OTHER_PARAMS)
    keyed_body = set(SpeechRequest.model_fields) - set(NOT_AUDIO_RELEVANT["SpeechRequest"])
    assert keyed_body == set(OTHER_BODY)


@pytest.mark.parametrize("field", sorted(OTHER_SYNTHESIS))
def test_each_field_of_the_engine_request_changes_the_key(field):
    assert key(req=request(**{field: OTHER_SYNTHESIS[field]})) != key()


@pytest.mark.parametrize("param", sorted(OTHER_PARAMS))
def test_each_sampling_parameter_changes_the_key(param):
    params = api.SamplingParams(**{param: OTHER_PARAMS[param]})
    assert key(req=request(params=params)) != key()


@pytest.mark.parametrize("field", sorted(OTHER_BODY))
def test_each_body_field_changes_the_key(field):
    assert key(speech=body(**{field: OTHER_BODY[field]})) != key()


def test_what_is_not_audio_leaves_the_key_alone():
    assert key(req=request(request_id="a", buffer_s=1.0)) == key(req=request(request_id="b"))
    assert key(speech=body(cache=True)) == key(speech=body())


def test_the_tenant_the_model_and_the_stored_voice_are_in_the_key():
    assert key(tenant="bob") != key()
    assert key(model={**MODEL, "revision": "abc"}) != key()
    assert key(model={**MODEL, "runtime_version": "2"}) != key()
    cloned = request(cloned_voice=OTHER_SYNTHESIS["cloned_voice"], voice=None)
    assert key(req=cloned, voice_id="voice_a") != key(req=cloned, voice_id="voice_b")


def test_a_one_shot_clone_is_keyed_by_its_prompt():
    a = request(cloned_voice=api.ClonedVoice(speaker_embedding=np.ones(4, np.float32)))
    b = request(cloned_voice=api.ClonedVoice(speaker_embedding=np.zeros(4, np.float32)))
    assert key(req=a) != key(req=b)


@pytest.mark.parametrize(
    ("seed", "cache", "cached"),
    [(None, None, False), (1, None, True), (1, False, False), (None, True, True)],
)
def test_only_reproducible_requests_are_cached(seed, cache, cached):
    assert wants_cache(seed, cache) is cached


def test_fp8_weights_are_another_model_in_the_key():
    from ttsfleet_runtime.server.cached_speech import model_identity
    from ttsfleet_runtime.settings import ServerSettings

    info = api.ModelInfo(
        name="m",
        size="1.7B",
        variant="CustomVoice",
        tokenizer_rate_hz=12,
        sample_rate=24000,
        frame_rate_hz=12.5,
        samples_per_frame=1920,
        speakers=("ryan",),
        languages=("english",),
        supports_instructions=True,
        supports_voice_clone=False,
    )

    def identity(weights: str) -> dict:
        return model_identity(ServerSettings(model="/models/x", weights=weights), info, "1")

    assert key(model=identity("fp8")) != key(model=identity("bf16"))
