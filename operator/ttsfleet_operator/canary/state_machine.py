"""The canary rollout as a pure function: (spec, status, analysis, now) -> status, Events.

    Idle ──candidate set──> Progressing(step 1, weight percent)
    Progressing ──Pass──> Progressing(step+1, higher weight) ... ──Pass on the last step──> Promoting
    Progressing ──Fail (failures > failureLimit)──> RolledBack
    Progressing ──Inconclusive x inconclusiveLimit──> Paused (weight held)
    Paused ──Pass──> Progressing (next step);  Paused ──Fail beyond the limit──> RolledBack
    Promoting ──stable Deployments serve the candidate, all ready──> Promoted
    any active phase ──annotation promote──> Promoting;  ──annotation abort──> RolledBack
    a new candidate revision (from any phase) ──> Progressing(step 1);  no candidate ──> Idle

Inconclusive (fewer than minRequests on the canary in the interval) is neither
healthy nor failing: it holds the weight, and after `inconclusiveLimit` of them
in a row the rollout pauses rather than rolls back, because an idle candidate
has shown nothing wrong; it resumes on the next passing interval, or a person
promotes or aborts it. Failed intervals count over the whole rollout (a pass
does not forgive them). Promoted and RolledBack are final for that candidate
revision; only a different candidate starts again.

Nothing here talks to the cluster or Prometheus: the reconciler runs the
analysis when `analysis_due` says so and renders from the returned status.
"""

from __future__ import annotations

import dataclasses
import datetime

from ttsfleet_operator.tts_service import AnalysisResult, CanarySpec, CanaryStatus

IDLE = "Idle"
PROGRESSING = "Progressing"
PAUSED = "Paused"
PROMOTING = "Promoting"
PROMOTED = "Promoted"
ROLLED_BACK = "RolledBack"
ACTIVE = (PROGRESSING, PAUSED)
# The stable track serves the candidate (canary/tracks.py).
PROMOTED_PHASES = (PROMOTING, PROMOTED)
# Each phase's value of the operator metric's `state` label (metrics.CANARY_STATE). The
# alert and the dashboards read these published values, so two phases share one.
METRIC_STATE = {
    IDLE: "none",
    PROGRESSING: "progressing",
    PROMOTING: "progressing",
    PAUSED: "paused",
    PROMOTED: "promoted",
    ROLLED_BACK: "rolled_back",
}
PHASES = tuple(METRIC_STATE)

PASS = "Pass"
FAIL = "Fail"
INCONCLUSIVE = "Inconclusive"

# Annotation a person sets to end a rollout by hand; acted on once per candidate revision.
ACTION_ANNOTATION = "ttsfleet.io/canary-action"
PROMOTE = "promote"
ABORT = "abort"

NORMAL = "Normal"
WARNING = "Warning"


@dataclasses.dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Transition:
    status: CanaryStatus
    events: tuple[Event, ...] = ()


def step_weight(spec: CanarySpec, step: int) -> int:
    """Weight of step 1..steps: `percent` first, then even increments toward 100 (reached by promotion)."""
    steps = spec.analysis.steps
    return spec.percent + (100 - spec.percent) * (step - 1) // steps


def _timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _parse(text: str | None) -> datetime.datetime | None:
    return parse_time(text) if text else None


def analysis_due(
    spec: CanarySpec | None, status: CanaryStatus | None, now: datetime.datetime
) -> bool:
    """True when an active rollout's interval has passed since its step began or its last analysis."""
    if spec is None or status is None or status.phase not in ACTIVE:
        return False
    times = [_parse(status.step_started)]
    if status.last_analysis is not None:
        times.append(_parse(status.last_analysis.time))
    since = max((t for t in times if t is not None), default=None)
    return since is None or (now - since).total_seconds() >= spec.analysis.interval_seconds


def seconds_until_analysis(
    spec: CanarySpec | None, status: CanaryStatus | None, now: datetime.datetime
) -> float:
    """How long until `analysis_due` turns true (0 if due, inf if never)."""
    if spec is None or status is None or status.phase not in ACTIVE:
        return float("inf")
    times = [_parse(status.step_started)]
    if status.last_analysis is not None:
        times.append(_parse(status.last_analysis.time))
    since = max((t for t in times if t is not None), default=None)
    if since is None:
        return 0.0
    return max(0.0, spec.analysis.interval_seconds - (now - since).total_seconds())


def pending_action(
    status: CanaryStatus | None, action: str | None, candidate_revision: str | None
) -> bool:
    """A promote/abort annotation not yet acted on for this candidate (it wins over any analysis)."""
    if action not in (PROMOTE, ABORT) or status is None or status.phase not in ACTIVE:
        return False
    return status.handled_action != f"{action}@{candidate_revision}"


def next_state(
    spec: CanarySpec | None,
    candidate_revision: str | None,
    status: CanaryStatus | None,
    now: datetime.datetime,
    analysis: AnalysisResult | None = None,
    action: str | None = None,
    stable_serves_candidate: bool = False,
) -> Transition:
    """The rollout's next status and the Events that explain the change.

    `candidate_revision` is None when no canary is asked for (no canary section
    or percent 0). `analysis` is the interval's result when one was due;
    `action` is the canary-action annotation's value; `stable_serves_candidate`
    says the stable Deployments run the candidate and are all ready.
    """
    status = status or CanaryStatus()
    stamp = _timestamp(now)

    if candidate_revision is None or spec is None:
        if status.phase == IDLE and status.revision is None:
            return Transition(status)
        events = ()
        if status.phase in (*ACTIVE, PROMOTING):
            events = (
                Event(
                    WARNING,
                    "CanaryCancelled",
                    "the candidate was removed from the spec; stable serves",
                ),
            )
        return Transition(CanaryStatus(message="no candidate"), events)

    if status.revision != candidate_revision:
        weight = step_weight(spec, 1)
        message = f"step 1 of {spec.analysis.steps}: candidate {candidate_revision} gets {weight}% of traffic"
        started = CanaryStatus(
            phase=PROGRESSING,
            revision=candidate_revision,
            step=1,
            weight=weight,
            step_started=stamp,
            message=message,
        )
        return Transition(started, (Event(NORMAL, "CanaryStarted", message),))

    if status.phase in (PROMOTED, ROLLED_BACK, IDLE):
        return Transition(status)

    if status.phase == PROMOTING:
        if not stable_serves_candidate:
            return Transition(status)
        message = f"candidate {candidate_revision} is stable; the canary Deployments are removed"
        promoted = status.model_copy(
            update={"phase": PROMOTED, "weight": 0, "step_started": stamp, "message": message}
        )
        return Transition(promoted, (Event(NORMAL, "CanaryPromoted", message),))

    if pending_action(status, action, candidate_revision):
        return _manual(spec, status, action, f"{action}@{candidate_revision}", stamp)

    if analysis is None:
        return Transition(status)
    return _analysed(spec, status, analysis.model_copy(update={"time": stamp}), stamp)


def _manual(
    spec: CanarySpec, status: CanaryStatus, action: str, handled: str, stamp: str
) -> Transition:
    if action == PROMOTE:
        message = (
            f"promoted by hand ({ACTION_ANNOTATION}={PROMOTE}) at step {status.step}: "
            "stable rolls to the candidate"
        )
        new = status.model_copy(
            update={
                "phase": PROMOTING,
                "handled_action": handled,
                "step_started": stamp,
                "message": message,
            }
        )
        return Transition(new, (Event(NORMAL, "CanaryPromoting", message),))
    message = f"aborted by hand ({ACTION_ANNOTATION}={ABORT}) at step {status.step}: candidate scaled to 0"
    return _rolled_back(status, message, stamp, handled_action=handled)


def _rolled_back(status: CanaryStatus, message: str, stamp: str, **update) -> Transition:
    new = status.model_copy(
        update={
            "phase": ROLLED_BACK,
            "weight": 0,
            "step_started": stamp,
            "message": message,
            **update,
        }
    )
    return Transition(new, (Event(WARNING, "CanaryRolledBack", message),))


def _analysed(
    spec: CanarySpec, status: CanaryStatus, analysis: AnalysisResult, stamp: str
) -> Transition:
    steps, limits = spec.analysis.steps, spec.analysis
    base = {"last_analysis": analysis}
    if analysis.result == FAIL:
        failures = status.failures + 1
        if failures > limits.failure_limit:
            message = (
                f"analysis failed {failures} times (limit {limits.failure_limit}): {analysis.reason};"
                " candidate scaled to 0, all traffic on stable"
            )
            return _rolled_back(status, message, stamp, failures=failures, inconclusive=0, **base)
        message = (
            f"step {status.step}: analysis failed "
            f"({failures} of {limits.failure_limit} tolerated): {analysis.reason}"
        )
        new = status.model_copy(
            update={**base, "failures": failures, "inconclusive": 0, "message": message}
        )
        return Transition(new, (Event(WARNING, "CanaryAnalysisFailed", message),))

    if analysis.result == INCONCLUSIVE:
        inconclusive = status.inconclusive + 1
        if inconclusive >= limits.inconclusive_limit and status.phase != PAUSED:
            message = (
                f"step {status.step}: {inconclusive} inconclusive intervals in a row ({analysis.reason});"
                f" paused at {status.weight}% until traffic shows a result or a person sets {ACTION_ANNOTATION}"
            )
            new = status.model_copy(
                update={**base, "phase": PAUSED, "inconclusive": inconclusive, "message": message}
            )
            return Transition(new, (Event(WARNING, "CanaryPaused", message),))
        message = f"step {status.step}: analysis inconclusive ({analysis.reason}); weight held at {status.weight}%"
        new = status.model_copy(update={**base, "inconclusive": inconclusive, "message": message})
        # Repeated while paused: no Event per interval (the status says it), only on the way in.
        events = (
            ()
            if status.phase == PAUSED
            else (Event(NORMAL, "CanaryAnalysisInconclusive", message),)
        )
        return Transition(new, events)

    if status.step >= steps:
        message = (
            f"analysis passed on the last step ({analysis.reason}): stable rolls to the candidate"
        )
        new = status.model_copy(
            update={
                **base,
                "phase": PROMOTING,
                "inconclusive": 0,
                "step_started": stamp,
                "message": message,
            }
        )
        return Transition(new, (Event(NORMAL, "CanaryPromoting", message),))
    step = status.step + 1
    weight = step_weight(spec, step)
    message = f"step {step} of {steps}: analysis passed ({analysis.reason}); candidate gets {weight}% of traffic"
    new = status.model_copy(
        update={
            **base,
            "phase": PROGRESSING,
            "step": step,
            "weight": weight,
            "inconclusive": 0,
            "step_started": stamp,
            "message": message,
        }
    )
    return Transition(new, (Event(NORMAL, "CanaryStepAdvanced", message),))
