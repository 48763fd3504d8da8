"""The sampling ranges have one home (`api.SAMPLING_BOUNDS`): the engine's admission
checks them at their edges, and the server's request schema publishes the same."""

from __future__ import annotations

import pytest

from ttsfleet_runtime.engine.api import SAMPLING_BOUNDS, InvalidRequest, SamplingParams


@pytest.mark.parametrize("param", SAMPLING_BOUNDS)
def test_each_sampling_range_is_checked_at_its_edges(param):
    bound = SAMPLING_BOUNDS[param]
    SamplingParams(**{param: bound.high}).validate()
    outside = [bound.high + 1, bound.low - 1]
    if bound.low_open:
        outside.append(bound.low)
    else:
        SamplingParams(**{param: bound.low}).validate()
    for value in outside:
        with pytest.raises(InvalidRequest) as refused:
            SamplingParams(**{param: value}).validate()
        assert refused.value.param == param


def test_the_server_publishes_the_engines_ranges():
    from ttsfleet_runtime.server.speech_request import SamplingFields

    fields = SamplingFields.model_json_schema()["properties"]
    for param, bound in SAMPLING_BOUNDS.items():
        published = next(kind for kind in fields[param]["anyOf"] if kind["type"] != "null")
        assert published["maximum"] == bound.high
        assert published["exclusiveMinimum" if bound.low_open else "minimum"] == bound.low
