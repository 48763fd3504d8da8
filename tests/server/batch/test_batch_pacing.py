"""The batch worker's pacing (server/batch/pacing.py) on a clock the test turns: how many
items it may hold as interactive times to first audio come in."""

from __future__ import annotations

from ttsfleet_runtime.server.batch.pacing import BatchPacing


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pacing(concurrency: int = 64, budget_s: float = 0.05) -> tuple[BatchPacing, Clock]:
    clock = Clock()
    return BatchPacing(concurrency, budget_s, window_s=2.0, clock=clock), clock


def test_without_interactive_traffic_the_limit_ramps_up_to_the_concurrency():
    p, clock = pacing()
    assert p.allowed() == 8  # an eighth to start: a batch starting under load ramps
    seen = []
    for _ in range(10):
        clock.now += 1.0
        seen.append(p.allowed())
    assert seen == [16, 24, 32, 40, 48, 56, 64, 64, 64, 64]


def test_interactive_p95_over_the_budget_halves_the_limit_down_to_one():
    p, clock = pacing()
    for _ in range(8):
        clock.now += 1.0
        p.allowed()
    assert p.allowed() == 64
    seen = []
    for _ in range(8):
        for _ in range(20):
            p.first_audio(0.08)  # over the 50 ms budget
        clock.now += 1.0
        seen.append(p.allowed())
    assert seen == [32, 16, 8, 4, 2, 1, 1, 1]


def test_the_limit_grows_again_once_the_slow_requests_leave_the_window():
    p, clock = pacing()
    for _ in range(20):
        p.first_audio(0.2)
    clock.now += 1.0
    assert p.allowed() == 4
    for _ in range(20):
        p.first_audio(0.02)  # fast ones, while the slow ones are still in the window
    clock.now += 1.0
    assert p.allowed() == 2
    clock.now += 1.5  # the slow ones are older than the window now
    assert p.allowed() == 10


def test_a_few_slow_requests_under_the_p95_do_not_slow_the_batch():
    p, clock = pacing()
    for _ in range(97):
        p.first_audio(0.03)
    for _ in range(3):
        p.first_audio(0.5)  # 3% of the window: above the p95
    clock.now += 1.0
    assert p.interactive_p95_s() == 0.03
    assert p.allowed() == 16


def test_decisions_wait_half_a_window():
    p, clock = pacing()
    clock.now += 0.5
    assert p.allowed() == 8
    clock.now += 0.5
    assert p.allowed() == 16
