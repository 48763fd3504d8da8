"""split_replicas: the one place that divides replicas between spot and on-demand."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ttsfleet_operator.replicas import ReplicaSplit, split_replicas

replicas = st.integers(min_value=0, max_value=1000)
ratios = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
floors = st.integers(min_value=0, max_value=1000)


@given(replicas, ratios, floors)
def test_the_pools_add_up_to_the_replicas(n, ratio, floor):
    split = split_replicas(n, ratio, floor)
    assert split.on_demand + split.spot == n
    assert split.on_demand >= 0 and split.spot >= 0


@given(replicas, ratios, floors)
def test_the_on_demand_floor_holds_while_there_are_enough_replicas(n, ratio, floor):
    assert split_replicas(n, ratio, floor).on_demand >= min(floor, n)


@given(replicas, ratios, floors)
def test_spot_share_is_the_ratio_within_rounding_unless_the_floor_takes_it(n, ratio, floor):
    split = split_replicas(n, ratio, floor)
    if split.on_demand > min(floor, n):  # the floor did not bind
        assert abs(split.spot - n * ratio) <= 0.5 + 1e-9


@given(replicas, ratios, floors)
def test_adding_a_replica_never_shrinks_a_pool(n, ratio, floor):
    smaller, larger = split_replicas(n, ratio, floor), split_replicas(n + 1, ratio, floor)
    assert larger.spot >= smaller.spot
    assert larger.on_demand >= smaller.on_demand


def test_half_on_an_odd_count_favours_on_demand():
    assert split_replicas(5, 0.5, 0) == ReplicaSplit(on_demand=3, spot=2)


def test_ratio_zero_is_all_on_demand_and_one_is_all_spot_above_the_floor():
    assert split_replicas(4, 0.0, 0).spot == 0
    assert split_replicas(4, 1.0, 1).spot == 3


def test_out_of_range_inputs_are_refused():
    with pytest.raises(ValueError):
        split_replicas(-1, 0.5, 0)
    with pytest.raises(ValueError):
        split_replicas(3, 1.5, 0)


weights = st.integers(min_value=0, max_value=100)


@given(replicas, ratios, floors, weights)
def test_with_a_canary_both_tracks_add_up_to_the_replicas_or_one_surge_pod(n, ratio, floor, weight):
    split = split_replicas(n, ratio, floor, canary_weight=weight)
    surge = 1 if n == 1 and weight > 0 else 0
    assert split.total == n + surge
    assert min(split.on_demand, split.spot, split.canary_on_demand, split.canary_spot) >= 0


@given(replicas, ratios, floors, weights)
def test_the_on_demand_floor_holds_over_both_tracks(n, ratio, floor, weight):
    split = split_replicas(n, ratio, floor, canary_weight=weight)
    assert split.on_demand + split.canary_on_demand >= min(floor, split.total)


@given(
    st.integers(min_value=2, max_value=1000), ratios, floors, st.integers(min_value=1, max_value=99)
)
def test_a_weighted_canary_has_a_pod_and_leaves_stable_one(n, ratio, floor, weight):
    split = split_replicas(n, ratio, floor, canary_weight=weight)
    assert 1 <= split.canary <= n - 1 and split.stable >= 1
    if 1 < n * weight / 100 < n - 1:
        assert abs(split.canary - n * weight / 100) <= 0.5 + 1e-9


def test_canary_examples():
    assert split_replicas(10, 0.0, 1, canary_weight=20) == ReplicaSplit(8, 0, 2, 0)
    # Stable keeps the floor; the canary's pods go to spot by the ratio.
    assert split_replicas(10, 0.5, 4, canary_weight=40) == ReplicaSplit(4, 2, 2, 2)
    # A fleet of one gets its candidate pod on top.
    assert split_replicas(1, 0.0, 1, canary_weight=10) == ReplicaSplit(1, 0, 1, 0)
    assert split_replicas(0, 0.0, 1, canary_weight=50).total == 0


def test_canary_weight_outside_0_100_is_refused():
    with pytest.raises(ValueError):
        split_replicas(3, 0.0, 1, canary_weight=101)
