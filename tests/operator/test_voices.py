"""spec.voices: the shared voice store's URL reaches the pods from its Secret only, the
retention through the engine ConfigMap, and only the Base variant may ask for voices."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ttsfleet_operator.render import render_fleet
from ttsfleet_runtime.settings import SETTINGS

BASE = {"size": "0.6B", "variant": "Base"}
URL_SECRET = {"name": "voice-store", "key": "url"}
VOICES = {"store": {"redis": {"urlSecret": URL_SECRET}}}


def rendered(service, kind: str) -> dict:
    (manifest,) = [m for m in render_fleet(service) if m["kind"] == kind]
    return manifest


def runtime_env(service) -> list[dict]:
    return rendered(service, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]


def test_the_store_url_comes_from_its_secret_never_the_configmap(make_service):
    service = make_service(model=BASE, voices=VOICES)
    variable = SETTINGS["voice_store_url"].env
    assert {"name": variable, "valueFrom": {"secretKeyRef": URL_SECRET}} in runtime_env(service)
    assert variable not in rendered(service, "ConfigMap")["data"]


def test_retention_defaults_to_the_runtimes_and_zero_keeps_voices(make_service):
    variable = SETTINGS["voice_retention_days"].env
    default = make_service(model=BASE, voices=VOICES)
    assert rendered(default, "ConfigMap")["data"][variable] == "30.0"
    keep = make_service(model=BASE, voices={**VOICES, "retentionDays": 0.0})
    assert rendered(keep, "ConfigMap")["data"][variable] == "0.0"
    with pytest.raises(ValidationError):
        make_service(model=BASE, voices={**VOICES, "retentionDays": -1.0})


def test_without_voices_no_store_is_wired(make_service):
    service = make_service(model=BASE)
    names = {e["name"] for e in runtime_env(service)}
    assert SETTINGS["voice_store_url"].env not in names
    assert SETTINGS["voice_retention_days"].env not in rendered(service, "ConfigMap")["data"]


@pytest.mark.parametrize("variant", ["CustomVoice", "VoiceDesign"])
def test_only_the_base_variant_takes_voices(make_service, variant):
    with pytest.raises(ValidationError, match="voices are cloned by the Base variant only"):
        make_service(model={"size": "1.7B", "variant": variant}, voices=VOICES)


def test_a_store_must_be_named(make_service):
    with pytest.raises(ValidationError, match="voices.store needs redis"):
        make_service(model=BASE, voices={"store": {}})
