"""Leader election's decisions without a cluster: when a follower may take the Lease, and
which timings are safe. The election against a real API server is e2e/test_operator_failover.py."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from support.ports import free_port
from ttsfleet_operator.leadership import LeaseRecord, LeaseTiming, Observation
from ttsfleet_operator.operator_main import _FollowerHealth

TIMING = LeaseTiming(lease_duration=8, renew_deadline=5, retry_period=1)


def record(holder: str, renew: str = "t0", duration: int = 8) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        lease_duration_seconds=duration,
        transitions=0,
        acquire_time="t0",
        renew_time=renew,
    )


def test_a_lease_renewed_within_its_duration_stays_with_its_holder():
    seen = Observation()
    seen.update(record("a", renew="t0"), now=100.0)
    seen.update(record("a", renew="t1"), now=105.0)  # renewed: the clock starts again
    assert seen.held_by_another("b", TIMING, now=112.9)
    assert not seen.held_by_another("b", TIMING, now=113.0)


def test_an_unchanged_record_expires_on_the_followers_clock_not_the_renew_time():
    # The record's renewTime is the leader's clock; only the change, as this process saw
    # it, counts, so a skewed clock elsewhere neither hastens nor delays a takeover.
    seen = Observation()
    seen.update(record("a", renew="2000-01-01T00:00:00.000000Z"), now=50.0)
    seen.update(record("a", renew="2000-01-01T00:00:00.000000Z"), now=57.0)
    assert seen.held_by_another("b", TIMING, now=57.9)
    assert not seen.held_by_another("b", TIMING, now=58.0)


def test_a_longer_duration_written_by_the_holder_is_honoured():
    seen = Observation()
    seen.update(record("a", duration=30), now=0.0)
    assert seen.held_by_another("b", TIMING, now=29.0)


def test_a_released_or_own_lease_is_free_to_take():
    seen = Observation()
    seen.update(record(""), now=0.0)
    assert not seen.held_by_another("b", TIMING, now=0.1)
    seen.update(record("b"), now=1.0)
    assert not seen.held_by_another("b", TIMING, now=1.1)


def test_nothing_seen_yet_is_nothing_held():
    assert not Observation().held_by_another("b", TIMING, now=0.0)


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"),
    [(8, 8, 1), (8, 9, 1), (8, 5, 5), (8, 5, 0)],
)
def test_timings_where_two_replicas_could_act_at_once_are_refused(duration, deadline, retry):
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseTiming(lease_duration=duration, renew_deadline=deadline, retry_period=retry)


def test_a_waiting_follower_answers_the_pods_probes_on_the_liveness_address():
    # The pod's liveness and readiness probes hit kopf's endpoint, which only the leader
    # runs: a follower must answer there itself, or it would be restarted (and never count
    # as available for the PodDisruptionBudget).
    port = free_port()
    with _FollowerHealth(f"http://127.0.0.1:{port}/healthz"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.status == 200
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert missing.value.code == 404
    # Handed over: the port is free for kopf's own endpoint.
    with _FollowerHealth(f"http://127.0.0.1:{port}/healthz"):
        pass
