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
