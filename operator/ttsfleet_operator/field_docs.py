"""Every TTSService field in Markdown (docs/fields.md), generated from the CRD schema.

`ttsfleet crd --fields` prints it; docs/fields.md is this output, so documentation,
CRD and model cannot disagree. ("Reference" in this repository means the official
qwen-tts implementation our model code is compared with, never this page.)
"""

from __future__ import annotations

import json

from ttsfleet_operator import cel, crd

PATTERN_SHOWN_MAX = 80


def _type(node: dict) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"])
    if node.get("type") == "array":
        return f"list of {_type(node.get('items', {}))}"
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return node.get("type", "any")


def _bounds(node: dict) -> str:
    parts = []
    if "minimum" in node or "maximum" in node:
        parts.append(f"{node.get('minimum', '')}..{node.get('maximum', '')}")
    if "maxItems" in node:
        parts.append(f"≤ {node['maxItems']} items")
    if "pattern" in node:
        # A grammar as long as the image reference's would drown the table: the CRD has it.
        pattern = node["pattern"]
        parts.append(
            f"matches `{pattern}`"
            if len(pattern) <= PATTERN_SHOWN_MAX
            else "matches the CRD's pattern"
        )
    return ", ".join(parts)


def _rows(node: dict, path: str, required: bool) -> list[str]:
    rows = []
    if path:
        default = (
            f"`{json.dumps(node['default'])}`"
            if "default" in node and node.get("type") != "object"
            else ""
        )
        description = node.get("description", "").replace("\n", " ").replace("|", "\\|")
        bounds = _bounds(node)
        if bounds:
            description = f"{description} ({bounds})" if description else bounds
        mark = " (required)" if required else ""
        rows.append(f"| `{path}`{mark} | {_type(node)} | {default} | {description} |")
    items = node.get("items") if node.get("type") == "array" else None
    children = node.get("properties") or (items or {}).get("properties") or {}
    child_prefix = f"{path}[]" if items else path
    for name, child in children.items():
        child_required = name in (node.get("required") or (items or {}).get("required") or [])
        rows += _rows(child, f"{child_prefix}.{name}" if child_prefix else name, child_required)
    return rows


def _rules(node: dict, path: str) -> list[str]:
    lines = [
        f"- `{path or '.'}`: {entry['message']}" for entry in node.get(cel.VALIDATIONS_KEY, [])
    ]
    for name, child in (node.get("properties") or {}).items():
        lines += _rules(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        lines += _rules(node["items"], f"{path}[]")
    return lines


def markdown() -> str:
    root = crd.build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    header = ["| field | type | default | meaning |", "|---|---|---|---|"]
    sections = [
        "### spec",
        "",
        *header,
        *_rows(root["properties"]["spec"], "", False),
        "",
        "### status (written by the operator)",
        "",
        *header,
        *_rows(root["properties"]["status"], "", False),
        "",
        "### Validation rules the API server enforces",
        "",
        *_rules(root, ""),
        "",
    ]
    return "\n".join(sections)
