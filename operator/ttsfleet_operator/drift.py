"""Does a live object still match what we rendered? Decides whether to apply.

Two checks, both needed: the rendered-hash annotation catches spec changes
(including fields we stopped rendering), and the semantic subset check catches
drift of fields we own (someone scaled or edited a child). The subset check
ignores what the API server adds (defaults, status, other managers' fields)
and compares quantities by value ("0.5" == "500m").
"""

from __future__ import annotations

import decimal
import hashlib
import json
import re
from typing import Any

from ttsfleet_operator import labels

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
_SUFFIX = {
    "": 1,
    "n": decimal.Decimal("1e-9"),
    "u": decimal.Decimal("1e-6"),
    "m": decimal.Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def rendered_hash(manifest: dict) -> str:
    """Stable hash of a manifest, ignoring the hash annotation itself."""
    stripped = json.loads(json.dumps(manifest))
    metadata = stripped.get("metadata", {})
    metadata.get("annotations", {}).pop(labels.RENDERED_HASH, None)
    if metadata.get("annotations") == {}:
        del metadata["annotations"]
    return hashlib.sha256(json.dumps(stripped, sort_keys=True).encode()).hexdigest()[:20]


def with_rendered_hash(manifest: dict) -> dict:
    annotated = json.loads(json.dumps(manifest))
    annotations = annotated["metadata"].setdefault("annotations", {})
    annotations[labels.RENDERED_HASH] = rendered_hash(manifest)
    return annotated


def parse_quantity(text: str) -> decimal.Decimal | None:
    match = _QUANTITY.match(text)
    if not match:
        return None
    try:
        number = decimal.Decimal(match.group(1))
    except decimal.InvalidOperation:
        return None
    suffix = match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * decimal.Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def is_subset(desired: Any, live: Any) -> bool:
    """Every field of `desired` is in `live` with an equal value; lists match item by item."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            key in live and is_subset(value, live[key]) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(map(is_subset, desired, live))
        )
    if desired == live:
        return True
    if isinstance(desired, str) and isinstance(live, str):
        left, right = parse_quantity(desired), parse_quantity(live)
        return left is not None and left == right
    return False


def needs_apply(desired: dict, live: dict | None) -> bool:
    if live is None:
        return True
    live_hash = live.get("metadata", {}).get("annotations", {}).get(labels.RENDERED_HASH)
    return live_hash != rendered_hash(desired) or not is_subset(desired, live)
