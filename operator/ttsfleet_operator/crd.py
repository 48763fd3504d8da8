"""The TTSService CustomResourceDefinition, generated from the pydantic models.

`ttsfleet crd` prints it; `crds/ttsservices.ttsfleet.io.yaml` and the chart's
copy are its committed output (a test fails when they drift). The pydantic JSON
schema is turned into a Kubernetes *structural* schema: references inlined,
`Optional` unwrapped, `title` and `additionalProperties: false` dropped (the API
server prunes unknown fields instead), numeric exclusive bounds rewritten in
OpenAPI v3.0 form.
"""

from __future__ import annotations

from typing import Any

import yaml

from ttsfleet_operator import tts_service
from ttsfleet_operator.tts_service import TTSService, TTSServiceSpec, TTSServiceStatus

NAME = f"{tts_service.PLURAL}.{tts_service.GROUP}"

# `kubectl get tts` columns: what an on-call engineer wants at a glance.
PRINTER_COLUMNS = [
    {"name": "Variant", "type": "string", "jsonPath": ".spec.model.variant"},
    {"name": "Size", "type": "string", "jsonPath": ".spec.model.size"},
    {"name": "GPU", "type": "string", "jsonPath": ".spec.gpu.class"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
    {
        "name": "Canary",
        "type": "integer",
        "jsonPath": ".status.canaryWeight",
        "description": "Canary weight, percent",
    },
    {
        "name": "Status",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# JSON schema keywords a structural schema keeps as they are.
_KEPT = {
    "type",
    "description",
    "default",
    "enum",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "nullable",
}


def structural_schema(model: type) -> dict[str, Any]:
    """OpenAPI v3 structural schema of a pydantic model, as the CRD wants it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}))


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        merged = {**target, **node}  # the field's own description and default win
        return _convert(merged, defs)
    if "anyOf" in node:
        options = [option for option in node.pop("anyOf") if option.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"a structural schema cannot hold a union: {options}")
        return _convert({**options[0], **node}, defs)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {key: value for key, value in node.items() if key in _KEPT}
    if out.get("default", 0) is None:
        del out["default"]
    if isinstance(node.get("exclusiveMinimum"), (int, float)):
        out["minimum"], out["exclusiveMinimum"] = node["exclusiveMinimum"], True
    if isinstance(node.get("exclusiveMaximum"), (int, float)):
        out["maximum"], out["exclusiveMaximum"] = node["exclusiveMaximum"], True
    if "enum" in node and "type" not in out:
        out["type"] = _json_type(node["enum"][0])
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            out[key] = value
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {
            name: _convert(child, defs) for name, child in node["properties"].items()
        }
        if node.get("required"):
            out["required"] = list(node["required"])
    elif isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(node["additionalProperties"], defs)
    if "items" in node:
        out["items"] = _convert(node["items"], defs)
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def build() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    spec_schema = structural_schema(TTSServiceSpec)
    spec_schema["description"] = "Desired state of a fleet of Qwen3-TTS servers."
    status_schema = structural_schema(TTSServiceStatus)
    status_schema["description"] = "Observed state, written by the operator."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "ttsfleet"}},
        "spec": {
            "group": tts_service.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": tts_service.KIND,
                "listKind": f"{tts_service.KIND}List",
                "plural": tts_service.PLURAL,
                "singular": tts_service.SINGULAR,
                "shortNames": list(tts_service.SHORT_NAMES),
                "categories": ["ttsfleet"],
            },
            "versions": [
                {
                    "name": tts_service.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "description": "A fleet of Qwen3-TTS speech servers on GPUs.",
                            "type": "object",
                            "x-kubernetes-validations": TTSService.cel_rules,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


HEADER = "# Generated by `ttsfleet crd` from ttsfleet_operator/tts_service.py. Do not edit.\n"


def to_yaml() -> str:
    return HEADER + yaml.safe_dump(build(), sort_keys=False, width=120)
