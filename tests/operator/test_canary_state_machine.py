"""The canary rollout state machine: every transition, driven directly (no cluster, no Prometheus)."""

from __future__ import annotations

import datetime
import typing

import pytest

from ttsfleet_operator import metrics
from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.tts_service import AnalysisResult, CanarySpec, CanaryStatus

T0 = datetime.datetime(2026, 11, 21, 12, 0, 0, tzinfo=datetime.UTC)
REV = "cand-1"


def spec(**analysis) -> CanarySpec:
    analysis = {
        "intervalSeconds": 60,
        "steps": 3,
        "failureLimit": 1,
        "inconclusiveLimit": 2,
        **analysis,
    }
    return CanarySpec.model_validate(
        {"percent": 10, "candidate": {"image": "runtime:2"}, "analysis": analysis}
    )


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def result(kind: str, reason: str = "r") -> AnalysisResult:
    return AnalysisResult(result=kind, reason=reason)


def started(canary: CanarySpec | None = None) -> CanaryStatus:
    return sm.next_state(canary or spec(), REV, None, T0).status


def reasons(transition: sm.Transition) -> list[str]:
    return [event.reason for event in transition.events]


def test_a_new_candidate_starts_at_step_one_with_percent_of_traffic():
    transition = sm.next_state(spec(), REV, None, T0)
    assert transition.status.phase == sm.PROGRESSING
    assert (transition.status.step, transition.status.weight, transition.status.revision) == (
        1,
        10,
        REV,
    )
    assert transition.status.step_started == "2026-11-21T12:00:00Z"
    assert reasons(transition) == ["CanaryStarted"]


def test_no_candidate_stays_idle_without_events():
    transition = sm.next_state(None, None, None, T0)
    assert transition.status.phase == sm.IDLE and transition.events == ()


def test_step_weights_rise_from_percent_toward_100():
    assert [sm.step_weight(spec(steps=4), step) for step in (1, 2, 3, 4)] == [10, 32, 55, 77]
    assert sm.step_weight(spec(steps=1), 1) == 10


def test_analysis_is_due_only_after_an_interval_since_the_step_began():
    status = started()
    assert not sm.analysis_due(spec(), status, at(59))
    assert sm.analysis_due(spec(), status, at(60))
    assert sm.seconds_until_analysis(spec(), status, at(45)) == 15


def test_analysis_is_never_due_outside_an_active_rollout():
    promoted = started().model_copy(update={"phase": sm.PROMOTED})
    assert not sm.analysis_due(spec(), promoted, at(3600))
    assert not sm.analysis_due(None, started(), at(3600))


def test_a_pass_advances_one_step_and_raises_the_weight():
    transition = sm.next_state(spec(), REV, started(), at(60), analysis=result(sm.PASS))
    status = transition.status
    assert (status.phase, status.step, status.weight) == (sm.PROGRESSING, 2, 40)
    assert (
        status.last_analysis.result == sm.PASS
        and status.last_analysis.time == "2026-11-21T12:01:00Z"
    )
    assert status.step_started == "2026-11-21T12:01:00Z"
    assert reasons(transition) == ["CanaryStepAdvanced"]


def test_passing_the_last_step_promotes_then_promoted_once_stable_serves_the_candidate():
    status = started()
    for second in (60, 120):
        status = sm.next_state(spec(), REV, status, at(second), analysis=result(sm.PASS)).status
    assert status.step == 3
    promoting = sm.next_state(spec(), REV, status, at(180), analysis=result(sm.PASS))
    assert promoting.status.phase == sm.PROMOTING and promoting.status.weight == status.weight
    assert reasons(promoting) == ["CanaryPromoting"]

    waiting = sm.next_state(spec(), REV, promoting.status, at(200), stable_serves_candidate=False)
    assert waiting.status == promoting.status and waiting.events == ()

    done = sm.next_state(spec(), REV, promoting.status, at(240), stable_serves_candidate=True)
    assert done.status.phase == sm.PROMOTED and done.status.weight == 0
    assert reasons(done) == ["CanaryPromoted"]


def test_failures_up_to_the_limit_hold_then_one_more_rolls_back():
    first = sm.next_state(
        spec(failureLimit=1), REV, started(), at(60), analysis=result(sm.FAIL, "error ratio 0.5")
    )
    assert (
        first.status.phase == sm.PROGRESSING
        and first.status.failures == 1
        and first.status.weight == 10
    )
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "CanaryAnalysisFailed")]

    second = sm.next_state(
        spec(failureLimit=1), REV, first.status, at(120), analysis=result(sm.FAIL, "ttfa")
    )
    assert (
        second.status.phase == sm.ROLLED_BACK
        and second.status.weight == 0
        and second.status.failures == 2
    )
    assert [(e.type, e.reason) for e in second.events] == [("Warning", "CanaryRolledBack")]
    assert "ttfa" in second.status.message


def test_a_failure_limit_of_zero_rolls_back_on_the_first_failure():
    transition = sm.next_state(
        spec(failureLimit=0), REV, started(), at(60), analysis=result(sm.FAIL)
    )
    assert transition.status.phase == sm.ROLLED_BACK


def test_a_pass_does_not_forgive_earlier_failures():
    status = sm.next_state(spec(), REV, started(), at(60), analysis=result(sm.FAIL)).status
    status = sm.next_state(spec(), REV, status, at(120), analysis=result(sm.PASS)).status
    assert status.failures == 1 and status.step == 2
    status = sm.next_state(spec(), REV, status, at(180), analysis=result(sm.FAIL)).status
    assert status.phase == sm.ROLLED_BACK


def test_inconclusive_holds_the_weight_and_is_not_a_pass():
    transition = sm.next_state(
        spec(), REV, started(), at(60), analysis=result(sm.INCONCLUSIVE, "3 requests")
    )
    status = transition.status
    assert (status.phase, status.step, status.weight, status.inconclusive) == (
        sm.PROGRESSING,
        1,
        10,
        1,
    )
    assert status.failures == 0
    assert reasons(transition) == ["CanaryAnalysisInconclusive"]


def test_inconclusive_up_to_the_limit_pauses_and_further_ones_stay_paused_quietly():
    status = sm.next_state(spec(), REV, started(), at(60), analysis=result(sm.INCONCLUSIVE)).status
    paused = sm.next_state(spec(), REV, status, at(120), analysis=result(sm.INCONCLUSIVE))
    assert paused.status.phase == sm.PAUSED and paused.status.weight == 10
    assert [(e.type, e.reason) for e in paused.events] == [("Warning", "CanaryPaused")]

    again = sm.next_state(spec(), REV, paused.status, at(180), analysis=result(sm.INCONCLUSIVE))
    assert again.status.phase == sm.PAUSED and again.status.inconclusive == 3 and again.events == ()


def test_a_paused_rollout_is_still_analysed_and_resumes_on_a_pass():
    status = started().model_copy(update={"phase": sm.PAUSED, "inconclusive": 2})
    assert sm.analysis_due(spec(), status, at(60))
    resumed = sm.next_state(spec(), REV, status, at(60), analysis=result(sm.PASS))
    assert (resumed.status.phase, resumed.status.step, resumed.status.inconclusive) == (
        sm.PROGRESSING,
        2,
        0,
    )


def test_a_paused_rollout_rolls_back_when_failures_pass_the_limit():
    status = started().model_copy(update={"phase": sm.PAUSED, "failures": 1})
    transition = sm.next_state(spec(failureLimit=1), REV, status, at(60), analysis=result(sm.FAIL))
    assert transition.status.phase == sm.ROLLED_BACK


def test_a_pass_resets_the_inconclusive_run():
    status = sm.next_state(spec(), REV, started(), at(60), analysis=result(sm.INCONCLUSIVE)).status
    status = sm.next_state(spec(), REV, status, at(120), analysis=result(sm.PASS)).status
    status = sm.next_state(spec(), REV, status, at(180), analysis=result(sm.INCONCLUSIVE)).status
    assert status.phase == sm.PROGRESSING and status.inconclusive == 1


def test_no_analysis_result_changes_nothing():
    status = started()
    transition = sm.next_state(spec(), REV, status, at(30))
    assert transition.status == status and transition.events == ()


@pytest.mark.parametrize("phase", [sm.PROGRESSING, sm.PAUSED])
def test_manual_promote_goes_to_promoting_once(phase):
    status = started().model_copy(update={"phase": phase})
    transition = sm.next_state(spec(), REV, status, at(10), action=sm.PROMOTE)
    assert transition.status.phase == sm.PROMOTING
    assert transition.status.handled_action == f"promote@{REV}"
    assert reasons(transition) == ["CanaryPromoting"]


@pytest.mark.parametrize("phase", [sm.PROGRESSING, sm.PAUSED])
def test_manual_abort_rolls_back(phase):
    status = started().model_copy(update={"phase": phase})
    transition = sm.next_state(spec(), REV, status, at(10), action=sm.ABORT)
    assert transition.status.phase == sm.ROLLED_BACK and transition.status.weight == 0
    assert "abort" in transition.status.message
    assert [(e.type, e.reason) for e in transition.events] == [("Warning", "CanaryRolledBack")]


def test_an_action_already_handled_for_this_candidate_is_not_acted_on_again():
    status = started().model_copy(update={"handled_action": f"abort@{REV}"})
    transition = sm.next_state(spec(), REV, status, at(10), action=sm.ABORT)
    assert transition.status == status


def test_an_unknown_action_is_ignored():
    status = started()
    assert sm.next_state(spec(), REV, status, at(10), action="yolo").status == status


@pytest.mark.parametrize("phase", [sm.PROMOTED, sm.ROLLED_BACK])
def test_final_phases_stay_for_the_same_candidate_whatever_happens(phase):
    status = started().model_copy(update={"phase": phase, "weight": 0})
    for kwargs in ({"analysis": result(sm.PASS)}, {"action": sm.PROMOTE}, {"action": sm.ABORT}):
        transition = sm.next_state(spec(), REV, status, at(600), **kwargs)
        assert transition.status == status and transition.events == ()


@pytest.mark.parametrize("phase", [sm.PROGRESSING, sm.PAUSED, sm.PROMOTED, sm.ROLLED_BACK])
def test_a_different_candidate_starts_a_fresh_rollout(phase):
    status = started().model_copy(update={"phase": phase, "failures": 2, "step": 3})
    transition = sm.next_state(spec(), "cand-2", status, at(600))
    new = transition.status
    assert (new.phase, new.revision, new.step, new.weight, new.failures) == (
        sm.PROGRESSING,
        "cand-2",
        1,
        10,
        0,
    )
    assert reasons(transition) == ["CanaryStarted"]


@pytest.mark.parametrize("phase", [sm.PROGRESSING, sm.PAUSED, sm.PROMOTING])
def test_removing_the_candidate_mid_rollout_cancels_it(phase):
    status = started().model_copy(update={"phase": phase})
    transition = sm.next_state(None, None, status, at(10))
    assert transition.status.phase == sm.IDLE and transition.status.revision is None
    assert [(e.type, e.reason) for e in transition.events] == [("Warning", "CanaryCancelled")]


def test_removing_the_candidate_after_promotion_returns_to_idle_quietly():
    status = started().model_copy(update={"phase": sm.PROMOTED})
    transition = sm.next_state(None, None, status, at(10))
    assert transition.status.phase == sm.IDLE and transition.events == ()


def test_the_machine_is_pure_equal_inputs_equal_outputs():
    status = started()
    first = sm.next_state(spec(), REV, status, at(60), analysis=result(sm.PASS))
    assert sm.next_state(spec(), REV, status, at(60), analysis=result(sm.PASS)) == first
    assert status == started()


def test_the_status_schema_and_the_operator_metric_know_exactly_the_machines_phases():
    assert set(typing.get_args(CanaryStatus.model_fields["phase"].annotation)) == set(sm.PHASES)
    assert set(metrics.CANARY_STATES) == set(sm.METRIC_STATE.values())
