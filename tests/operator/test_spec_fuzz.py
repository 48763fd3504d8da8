"""The spec fuzzer through `ttsfleet render`: a hostile spec is refused with a message (never a
traceback), and whatever is accepted renders only manifests that are safe to apply.

The specs come from support/hostile_specs.py; e2e/test_spec_fuzz.py sends the same kind
to the real API server and checks that its verdict equals the one here.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from unittest import mock

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.hostile_specs import hostile_documents
from ttsfleet_operator import grammar, tts_service
from ttsfleet_operator.cli import main

# Set by the operator itself, not from runtime.env.
OPERATOR_ENV = {*tts_service.ENV_OPERATOR_NAMES, "TTSFLEET_SERVICE"}
# C0/C1 controls and the bidirectional overrides and isolates.
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def render(document: dict | str) -> tuple[int, str, str]:
    """`ttsfleet render -f -` on YAML text, or on a document as JSON (which is YAML and
    escapes everything)."""
    text = document if isinstance(document, str) else json.dumps(document)
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(sys, "stdin", io.StringIO(text)),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(["render", "-f", "-"])
    return code, out.getvalue(), err.getvalue()


def full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value) is not None


def strings_outside_env_values(node, inside_env=False):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            if not (inside_env and key == "value"):
                yield from strings_outside_env_values(value, inside_env or key == "env")
    elif isinstance(node, list):
        for value in node:
            yield from strings_outside_env_values(value, inside_env)
    elif isinstance(node, str):
        yield node


def assert_safe(document: dict, manifests: list[dict]) -> None:
    spec = document["spec"]
    auth_disabled = (spec.get("runtime") or {}).get("auth") == "Disabled"
    for manifest in manifests:
        metadata = manifest["metadata"]
        assert full(grammar.DNS1123_SUBDOMAIN, metadata["name"]) and len(metadata["name"]) <= 63
        assert all(full(grammar.LABEL_VALUE, value) for value in metadata["labels"].values())
        for text in strings_outside_env_values(
            {k: v for k, v in manifest.items() if k != "stringData"}
        ):
            assert not UNPRINTABLE.search(text), (manifest["kind"], text)
        if manifest["kind"] == "ConfigMap":
            data = manifest["data"]
            assert "/../" not in data["TTSFLEET_MODEL"] + "/" and not data[
                "TTSFLEET_MODEL"
            ].startswith("..")
            assert data["TTSFLEET_MODEL"].startswith("/models") or full(
                grammar.HUB_REPO_ID, data["TTSFLEET_MODEL"]
            )
            if "TTSFLEET_MODEL_REVISION" in data:
                assert full(grammar.HUB_REVISION, data["TTSFLEET_MODEL_REVISION"])
            assert (data.get("TTSFLEET_AUTH") == "disabled") == auth_disabled
        if manifest["kind"] == "Deployment":
            pod = manifest["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            assert full(grammar.IMAGE_REFERENCE, container["image"])
            assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
            names = [item["name"] for item in container["env"]]
            assert len(names) == len(set(names)) and all(
                full(grammar.ENV_NAME, name) for name in names
            )
            for name in set(names) - OPERATOR_ENV:
                assert not name.startswith(
                    (tts_service.ENV_SETTINGS_PREFIX, *tts_service.ENV_LOADER_PREFIXES)
                )
                assert not name.startswith(tts_service.ENV_GPU_RUNTIME_PREFIX)
                assert name not in tts_service.ENV_LOADER_NAMES
            referenced = [pod.get("serviceAccountName", "ok")]
            referenced += [item["name"] for item in pod.get("imagePullSecrets", [])]
            for volume in pod["volumes"]:
                referenced.append((volume.get("secret") or {}).get("secretName", "ok"))
                referenced.append(
                    (volume.get("persistentVolumeClaim") or {}).get("claimName", "ok")
                )
            assert all(full(grammar.DNS1123_SUBDOMAIN, name) for name in referenced), referenced
            assert any(v.get("secret") for v in pod["volumes"]) != auth_disabled


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(hostile_documents())
def test_render_refuses_hostile_specs_cleanly_and_renders_only_safe_manifests(document):
    code, out, err = render(document)
    if code == 0:
        manifests = [m for m in yaml.safe_load_all(out) if m]
        assert manifests
        assert_safe(document, manifests)
    else:
        assert code == 1 and out == ""
        assert err.startswith("error: ") and "Traceback" not in err, err


# YAML's syntax characters, some tags, and a valid TTSService to splice them into.
YAML_PIECES = st.sampled_from(
    [
        " ",
        "\n",
        "  ",
        "- ",
        ": ",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&a ",
        "*a",
        "!!int ",
        "!!float ",
        "!!binary ",
        "!!set ",
        "!!timestamp ",
        "!!python/object:os.system ",
        "<<: ",
        "? ",
        "|",
        ">",
        "'",
        '"',
        "#",
        "%YAML 1.1\n",
        "---\n",
        "...\n",
        "0x1F",
        "1e999",
        "2001-13-45",
        "~",
        "null",
        "metadata: ",
        "spec: ",
        "name: ",
        "replicas: ",
        "\t",
        "\ufeff",
        "\x85",
        "\u2028",
    ]
)
SPEC_TEXT = (
    "apiVersion: ttsfleet.io/v1alpha1\nkind: TTSService\nmetadata: {name: tts}\n"
    "spec:\n  model: {size: 1.7B, variant: Base}\n  replicas: 2\n"
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(YAML_PIECES, max_size=12), st.integers(min_value=0, max_value=len(SPEC_TEXT)))
def test_render_answers_any_yaml_with_manifests_or_an_error_message(pieces, at):
    code, out, err = render(SPEC_TEXT[:at] + "".join(pieces) + SPEC_TEXT[at:])
    assert code in (0, 1)
    if code == 1:
        assert out == "" and err.startswith("error: ") and "Traceback" not in err, err
