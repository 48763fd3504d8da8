"""CEL validation rules, written once and enforced in two places.

The rules live on the pydantic models (as `x-kubernetes-validations`, which the
CRD generator copies into the schema the API server enforces). The same rules
are evaluated here, in Python, when a model is built, so `ttsfleet render`
refuses exactly the specs the API server refuses.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import celpy

# The key the API server reads; also where the pydantic models keep their rules.
VALIDATIONS_KEY = "x-kubernetes-validations"


def rule(
    expression: str, message: str, *, field_path: str | None = None, reason: str | None = None
) -> dict:
    """One `x-kubernetes-validations` entry; `message` is what a user reads on refusal."""
    entry = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    if reason:
        entry["reason"] = reason
    return entry


@functools.cache
def _program(expression: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def failed_messages(rules: list[dict], value: dict[str, Any]) -> list[str]:
    """Messages of the rules that `value` (bound to `self`) breaks.

    `value` must be what the API server would see: JSON with defaults applied and
    absent optional fields left out (has() depends on it).
    """
    rules_key = tuple((entry["rule"], entry["message"]) for entry in rules)
    return list(
        _failed_messages(rules_key, json.dumps(value, sort_keys=True, separators=(",", ":")))
    )


# celpy interprets a rule in milliseconds, and the operator validates every TTSService on
# every pass: verdicts are kept per (rules, value), since the same parts recur unchanged.
@functools.lru_cache(maxsize=4096)
def _failed_messages(rules: tuple[tuple[str, str], ...], value_json: str) -> tuple[str, ...]:
    activation = {"self": celpy.json_to_cel(json.loads(value_json))}
    failed = []
    for expression, message in rules:
        try:
            result = _program(expression).evaluate(activation)
        except celpy.CELEvalError:
            # The API server refuses an object whose rule cannot be evaluated, too.
            result = False
        if isinstance(result, Exception) or not bool(result):
            failed.append(message)
    return tuple(failed)
