"""The TTSService model refuses what users get wrong, with messages they understand.

These are the CRD's own CEL rules (the model carries them), evaluated in
Python; the API server evaluates the same text in e2e.
"""

import pytest
from pydantic import ValidationError


def refusal(make_service, **spec) -> str:
    with pytest.raises(ValidationError) as caught:
        make_service(**spec)
    return str(caught.value)


def test_defaults_fill_every_section(make_service):
    spec = make_service().spec
    assert spec.replicas == 1
    assert spec.gpu.gpu_class == "h100" and spec.gpu.count == 1
    assert spec.spot.ratio == 0.0 and spec.spot.min_on_demand == 1
    assert spec.autoscaling.enabled is False
    assert spec.engine.cuda_graphs is True
    assert spec.model.tokenizer_rate_hz == 12
    assert spec.canary is None


def test_default_source_is_the_official_hub_repository(make_service):
    model = make_service(model={"size": "0.6B", "variant": "Base"}).spec.model
    assert model.hub_id() == "Qwen/Qwen3-TTS-12Hz-0.6B-Base"


def test_voice_design_only_at_1_7b(make_service):
    assert "VoiceDesign is only released at size 1.7B" in refusal(
        make_service, model={"size": "0.6B", "variant": "VoiceDesign"}
    )
    make_service(model={"size": "1.7B", "variant": "VoiceDesign"})


def test_25_hz_needs_an_explicit_checkpoint(make_service):
    assert "no 25 Hz Qwen3-TTS checkpoint is published" in refusal(
        make_service, model={"size": "1.7B", "variant": "Base", "tokenizerRateHz": 25}
    )
    make_service(model={"size": "1.7B", "variant": "Base", "tokenizerRateHz": 25, "source": {"hub": "me/tts-25hz"}})


def test_source_is_hub_or_pvc_not_both_nor_neither(make_service):
    both = {"hub": "a/b", "pvc": {"claimName": "models"}}
    assert "exactly one of hub or pvc" in refusal(
        make_service, model={"size": "1.7B", "variant": "Base", "source": both}
    )
    assert "exactly one of hub or pvc" in refusal(make_service, model={"size": "1.7B", "variant": "Base", "source": {}})


def test_a_pvc_source_has_no_revision(make_service):
    model = {"size": "1.7B", "variant": "Base", "source": {"pvc": {"claimName": "models"}}, "revision": "abc"}
    assert "a PVC source has no revision" in refusal(make_service, model=model)


def test_min_replicas_not_above_max(make_service):
    assert "minReplicas must not exceed autoscaling.maxReplicas" in refusal(
        make_service, autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 3}
    )


def test_on_demand_floor_not_above_max_replicas_when_autoscaling(make_service):
    assert "spot.minOnDemand must not exceed autoscaling.maxReplicas" in refusal(
        make_service, autoscaling={"enabled": True, "maxReplicas": 3}, spot={"ratio": 0.5, "minOnDemand": 4}
    )
    # Without autoscaling the floor is simply capped by spec.replicas.
    make_service(spot={"ratio": 0.5, "minOnDemand": 4})


@pytest.mark.parametrize("ratio", [-0.1, 1.01])
def test_spot_ratio_is_a_fraction(make_service, ratio):
    refusal(make_service, spot={"ratio": ratio})


@pytest.mark.parametrize("percent", [-1, 101])
def test_canary_percent_in_0_to_100(make_service, percent):
    refusal(make_service, canary={"percent": percent, "candidate": {"image": "x:2"}})


def test_canary_needs_a_candidate_that_differs(make_service):
    assert "needs an image or a modelRevision" in refusal(make_service, canary={"candidate": {}})
    same_image = {"candidate": {"image": "ghcr.io/ttsfleet/runtime:0.1.0"}}
    assert "must differ from stable" in refusal(make_service, canary=same_image)
    same_revision = {"candidate": {"modelRevision": "v1"}}
    model = {"size": "1.7B", "variant": "Base", "revision": "v1"}
    assert "must differ from stable" in refusal(make_service, model=model, canary=same_revision)
    make_service(model=model, canary={"candidate": {"modelRevision": "v2"}})
    make_service(canary={"candidate": {"image": "ghcr.io/ttsfleet/runtime:0.2.0"}})


def test_gpu_count_at_least_one(make_service):
    refusal(make_service, gpu={"count": 0})


def test_unknown_fields_are_refused(make_service):
    assert "extra" in refusal(make_service, replicaz=3).lower()


def test_names_leave_room_for_child_suffixes(make_service):
    assert "at most 40 characters" in refusal(make_service, name="x" * 41)
    make_service(name="x" * 40)
