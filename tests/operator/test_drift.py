"""When is a live child different from what we rendered?"""

import pytest

from ttsfleet_operator import drift


@pytest.mark.parametrize(
    "desired, live",
    [("4", "4000m"), ("500m", "0.5"), ("1Gi", "1024Mi"), ("1k", "1000"), ("800m", "0.8")],
)
def test_quantities_compare_by_value(desired, live):
    assert drift.is_subset(desired, live)


def test_different_quantities_and_words_differ():
    assert not drift.is_subset("1Gi", "1G")
    assert not drift.is_subset("true", "false")


def test_fields_the_server_adds_are_ignored_but_changed_fields_are_not():
    desired = {"spec": {"replicas": 2, "template": {"containers": [{"name": "a"}]}}}
    live = {
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 600,
            "template": {"containers": [{"name": "a", "terminationMessagePath": "/dev/x"}]},
        }
    }
    assert drift.is_subset(desired, live)
    live["spec"]["replicas"] = 3
    assert not drift.is_subset(desired, live)


def test_a_removed_or_added_list_item_is_drift():
    assert not drift.is_subset({"l": [1, 2]}, {"l": [1]})
    assert not drift.is_subset({"l": [1]}, {"l": [1, 2]})


def test_hash_changes_when_a_field_is_dropped_from_the_rendering():
    full = {"metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {"k": 1}}
    dropped = {"metadata": {"name": "x"}, "spec": {"k": 1}}
    live = drift.with_rendered_hash(full)
    assert not drift.needs_apply(drift.with_rendered_hash(full), live)
    # The live object still holds every desired field, yet the hash tells the label must go.
    assert drift.needs_apply(drift.with_rendered_hash(dropped), live)


def test_a_missing_object_needs_applying():
    assert drift.needs_apply({"metadata": {"name": "x"}}, None)
