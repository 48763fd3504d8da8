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


@pytest.mark.parametrize(
    ("days", "fragment"),
    [
        (1e-12, "retentionDays must be 0 \\(keep voices until deleted\\) or at least 0.0416667"),
        (0.04, "retentionDays must be 0 \\(keep voices until deleted\\) or at least 0.0416667"),
        (3_000_000.0, "less than or equal to 36500"),
        (1e300, "less than or equal to 36500"),
    ],
)
def test_a_retention_the_runtime_would_refuse_is_refused(make_service, days, fragment):
    # The runtime refuses these at start (settings.py): the resource must not render them.
    with pytest.raises(ValidationError, match=fragment):
        make_service(model=BASE, voices={**VOICES, "retentionDays": days})


def test_the_retention_bounds_are_rendered(make_service):
    variable = SETTINGS["voice_retention_days"].env
    for days in (1 / 24, 36_500.0):
        service = make_service(model=BASE, voices={**VOICES, "retentionDays": days})
        assert float(rendered(service, "ConfigMap")["data"][variable]) == days


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
