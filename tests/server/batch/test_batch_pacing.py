"""The batch worker's pacing (server/batch/pacing.py) on a clock the test turns: how many
items it may hold as interactive times to first audio come in."""

from __future__ import annotations

from ttsfleet_runtime.server.batch.pacing import BatchPacing

DECISION_S = 0.5  # a quarter of the 2 s window


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pacing(concurrency: int = 64, budget_s: float = 0.05) -> tuple[BatchPacing, Clock]:
    clock = Clock()
    return BatchPacing(concurrency, budget_s, window_s=2.0, clock=clock), clock


def decisions(p: BatchPacing, clock: Clock, n: int, ttfa_s: float | None = None) -> list[int]:
    """The limits of `n` decisions, with 20 interactive requests of `ttfa_s` before each."""
    seen = []
    for _ in range(n):
        for _ in range(20 if ttfa_s is not None else 0):
            p.first_audio(ttfa_s)
        clock.now += DECISION_S
        seen.append(p.allowed())
    return seen


def test_without_interactive_traffic_the_limit_ramps_up_to_the_concurrency():
    p, clock = pacing()
    assert p.allowed() == 4  # a sixteenth to start: a batch starting under load ramps
    assert decisions(p, clock, 17) == [*range(8, 65, 4), 64, 64]


def test_interactive_p95_over_the_budget_halves_the_limit_down_to_one():
    p, clock = pacing()
    decisions(p, clock, 16)
    assert p.allowed() == 64
    assert decisions(p, clock, 8, ttfa_s=0.08) == [32, 16, 8, 4, 2, 1, 1, 1]


def test_one_slow_moment_halves_the_limit_once():
    p, clock = pacing()
    decisions(p, clock, 16)
    assert decisions(p, clock, 1, ttfa_s=0.2) == [32]
    # Fast requests after it: the slow ones, judged already, weigh no more.
    assert decisions(p, clock, 3, ttfa_s=0.02) == [36, 40, 44]


def test_under_the_budget_the_limit_keeps_growing():
    p, clock = pacing()
    assert decisions(p, clock, 3, ttfa_s=0.03) == [8, 12, 16]


def test_a_few_slow_requests_under_the_p95_do_not_slow_the_batch():
    p, clock = pacing()
    for _ in range(97):
        p.first_audio(0.03)
    for _ in range(3):
        p.first_audio(0.5)  # 3% of the window: above the p95
    assert p.interactive_p95_s() == 0.03
    clock.now += DECISION_S
    assert p.allowed() == 8


def test_decisions_wait_a_quarter_window():
    p, clock = pacing()
    clock.now += DECISION_S / 2
    assert p.allowed() == 4
    clock.now += DECISION_S / 2
    assert p.allowed() == 8
