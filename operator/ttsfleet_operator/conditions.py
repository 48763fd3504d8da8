"""Standard status conditions (metav1.Condition) with honest transition times.

`lastTransitionTime` moves only when a condition's status changes; a new reason
or message alone keeps it. That also keeps a status write from happening when
nothing changed.
"""

from __future__ import annotations

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
CANARY_PROGRESSING = "CanaryProgressing"
# kstatus's abnormal-true pair (Flux, kpt, cli-utils read them): Reconciling while the
# operator is still moving toward the spec, Stalled when it will not get there unaided.
RECONCILING = "Reconciling"
STALLED = "Stalled"

TRUE = "True"
FALSE = "False"


def find(conditions: list[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def condition(
    previous: list[dict] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> dict:
    old = find(previous, type_)
    changed = old is None or old.get("status") != status
    result = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now if changed else old["lastTransitionTime"],
    }
    if generation is not None:
        result["observedGeneration"] = generation
    return result
