"""Canary traffic by Gateway API: with the HTTPRoute CRD served (installed from the
published sigs.k8s.io/gateway-api module by hack/gateway-api.sh), a TTSService with a
candidate gets an HTTPRoute whose stable/canary weights are the ones its status reports.
No Prometheus here, so every analysis is inconclusive: the rollout holds step 1's
weight and, after `inconclusiveLimit` such intervals, pauses there."""

from __future__ import annotations

import pytest

from support.operator_fixtures import (
    children,
    load_sample,
    owned_by,
    tts,
    wait_ready,
)
from ttsfleet_operator.canary.state_machine import PAUSED, PROGRESSING, step_weight
from ttsfleet_operator.render.names import route_name, service_name, track_service_name
from ttsfleet_operator.replicas import canary_replicas
from ttsfleet_operator.tts_service import CanarySpec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def gateway_operator(gateway_api, running_operator):
    # The operator caches discovery for a minute; a fresh process sees HTTPRoute at once.
    running_operator.restart()
    return running_operator


def _route_weights(route: dict) -> dict[str, int]:
    (rule,) = route["spec"]["rules"]
    return {ref["name"]: ref["weight"] for ref in rule["backendRefs"]}


def test_canary_gets_an_httproute_with_the_weights_its_status_reports(
    cluster, gateway_operator, namespace
):
    manifest = load_sample("canary.yaml")
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    # Short intervals so the inconclusive path is seen within the test.
    spec["canary"]["analysis"].update(intervalSeconds=10, inconclusiveLimit=2)
    canary = CanarySpec.model_validate(spec["canary"])
    first = step_weight(canary, 1)
    cluster.apply(manifest, "-n", namespace)
    obj = wait_ready(cluster, name, namespace)

    status = obj["status"]
    assert status["canary"]["phase"] == PROGRESSING, status["canary"]
    assert (
        status["canary"]["step"],
        status["canary"]["weight"],
        status["canaryWeight"],
    ) == (1, first, first)

    stable, candidate = (
        track_service_name(name, "stable"),
        track_service_name(name, "canary"),
    )
    route = cluster.wait_for(
        lambda: next(iter(children(cluster, "httproutes", name, namespace)), None),
        timeout=30,
        what="HTTPRoute",
    )
    assert route["metadata"]["name"] == route_name(name)
    assert owned_by(route, obj)
    assert route["spec"]["parentRefs"] == [
        {
            "group": "",
            "kind": "Service",
            "name": service_name(name),
            "port": route["spec"]["parentRefs"][0]["port"],
        }
    ]
    assert _route_weights(route) == {stable: 100 - first, candidate: first}
    for svc in (stable, candidate):
        cluster.kubectl("get", "service", svc, "-n", namespace)
    # Traffic goes by the route, yet the candidate runs its share of the pods.
    assert status["canaryPools"]["onDemand"] + status["canaryPools"]["spot"] == canary_replicas(
        spec["replicas"], first
    )

    # Two inconclusive intervals (no Prometheus): paused, weight held, route unchanged.
    paused = cluster.wait_for(
        lambda: (s := tts(cluster, name, namespace)["status"])["canary"]["phase"] == PAUSED and s,
        timeout=60,
        what="the rollout to pause after inconclusiveLimit inconclusive intervals",
    )
    assert (paused["canary"]["weight"], paused["canaryWeight"]) == (first, first), paused["canary"]
    assert "inconclusive" in paused["canary"]["message"], paused["canary"]["message"]
    assert paused["canary"]["lastAnalysis"]["result"] == "Inconclusive"
    (route,) = children(cluster, "httproutes", name, namespace)
    assert _route_weights(route) == {stable: 100 - first, candidate: first}
