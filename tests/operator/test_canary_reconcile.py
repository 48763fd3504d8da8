"""Canary rollouts through whole reconcile passes, against the fake API (FakeCluster: no API
server in unit tests) and a scripted analysis standing in for Prometheus (the e2e suite
and test_canary_analysis.py use a real one)."""

from __future__ import annotations

import copy

import pytest

from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.reconcile import Reconciler
from ttsfleet_operator.tts_service import AnalysisResult

STABLE_IMAGE = "ghcr.io/ttsfleet/runtime:1.0"
CANDIDATE_IMAGE = "ghcr.io/ttsfleet/runtime:2.0"


def body(annotations=None, **overrides) -> dict:
    spec = {
        "model": {"size": "1.7B", "variant": "CustomVoice"},
        "replicas": 5,
        "runtime": {"image": STABLE_IMAGE},
        "canary": {
            "percent": 20,
            "candidate": {"image": CANDIDATE_IMAGE},
            "analysis": {
                "intervalSeconds": 60,
                "steps": 2,
                "failureLimit": 1,
                "inconclusiveLimit": 2,
            },
        },
    }
    spec.update(overrides)
    metadata = {"name": "demo", "namespace": "voice", "uid": "uid-1", "generation": 1}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": metadata,
        "spec": spec,
    }


class Rollout:
    """Runs passes a minute apart, keeps the written status on the object as the API server
    would (a merge patch: None removes a field), and feeds scripted analysis results."""

    def __init__(self, cluster, obj):
        self.cluster = cluster
        self.obj = obj
        self.results: list[str] = []
        self.states: list[str] = []
        self.minute = 0
        self.reconciler = Reconciler(cluster, now=self._now, analyse=self._analyse)

    def _now(self) -> str:
        return f"2026-11-21T16:{self.minute:02d}:00Z"

    async def _analyse(self, service):
        return AnalysisResult(result=self.results.pop(0), reason="scripted")

    async def step(self, *results: str):
        self.results = list(results)
        recorded = []
        original = self.cluster.patch_status

        async def patch_status(api_version, kind, namespace, name, status):
            recorded.append(status)
            return await original(api_version, kind, namespace, name, status)

        self.cluster.patch_status = patch_status
        try:
            outcome = await self.reconciler.reconcile(copy.deepcopy(self.obj))
        finally:
            self.cluster.patch_status = original
        assert outcome.problem is None, outcome.problem
        assert self.results == [], "an analysis was scripted but not due"
        if outcome.canary_phase is not None:  # the operator metric's state label for it
            self.states.append(sm.METRIC_STATE[outcome.canary_phase])
        if recorded:
            status = {**self.obj.get("status", {}), **recorded[-1]}
            self.obj["status"] = {k: v for k, v in status.items() if v is not None}
        self.minute += 1
        return outcome

    @property
    def canary(self) -> dict:
        return self.obj["status"].get("canary", {})

    def condition(self, type_: str) -> dict:
        return next(c for c in self.obj["status"]["conditions"] if c["type"] == type_)

    def replicas(self) -> dict[str, int]:
        return {
            name: self.cluster.get("Deployment", "voice", name)["spec"]["replicas"]
            for name in self.deployments()
        }

    def deployments(self) -> list[str]:
        return self.cluster.names("Deployment")

    def image(self, deployment: str) -> str:
        pod = self.cluster.get("Deployment", "voice", deployment)["spec"]["template"]["spec"]
        return pod["containers"][0]["image"]

    def event_reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.cluster.events]


@pytest.fixture
def rollout(fake_cluster):
    return Rollout(fake_cluster, body())


async def test_a_healthy_canary_steps_up_then_promotes_and_stable_serves_the_candidate(rollout):
    await rollout.step()
    assert rollout.replicas() == {"demo-canary-on-demand": 1, "demo-on-demand": 4}
    assert (
        rollout.image("demo-canary-on-demand") == CANDIDATE_IMAGE
        and rollout.image("demo-on-demand") == STABLE_IMAGE
    )
    assert rollout.cluster.names("ConfigMap") == ["demo-canary-engine", "demo-engine"]
    assert (
        rollout.canary["phase"],
        rollout.canary["step"],
        rollout.obj["status"]["canaryWeight"],
    ) == (
        sm.PROGRESSING,
        1,
        20,
    )
    assert rollout.condition("CanaryProgressing")["status"] == "True"
    assert rollout.obj["status"]["canaryPools"] == {"onDemand": 1, "spot": 0}
    stable_revision, canary_revision = (
        rollout.obj["status"]["stableRevision"],
        rollout.obj["status"]["canaryRevision"],
    )
    assert stable_revision != canary_revision

    await rollout.step(sm.PASS)  # a minute later: the interval has passed
    assert rollout.canary["step"] == 2 and rollout.obj["status"]["canaryWeight"] == 60
    assert rollout.replicas() == {"demo-canary-on-demand": 3, "demo-on-demand": 2}

    await rollout.step(sm.PASS)
    assert rollout.canary["phase"] == sm.PROMOTING
    assert rollout.image("demo-on-demand") == CANDIDATE_IMAGE, "stable rolls to the candidate"
    assert rollout.replicas() == {"demo-canary-on-demand": 3, "demo-on-demand": 2}, (
        "canary holds until stable is up"
    )

    await rollout.step()  # stable not ready yet: still promoting
    assert rollout.canary["phase"] == sm.PROMOTING
    rollout.cluster.mark_deployments_ready()
    await rollout.step()
    assert rollout.canary["phase"] == sm.PROMOTED
    await rollout.step()
    assert rollout.deployments() == ["demo-on-demand"] and rollout.replicas() == {
        "demo-on-demand": 5
    }
    assert rollout.obj["status"]["stableRevision"] == canary_revision
    assert (
        "canaryRevision" not in rollout.obj["status"] and rollout.obj["status"]["canaryWeight"] == 0
    )
    assert rollout.condition("CanaryProgressing")["reason"] == sm.PROMOTED
    assert rollout.event_reasons().count("CanaryPromoted") == 1
    assert rollout.states[0] == "progressing" and rollout.states[-1] == "promoted"


async def test_moving_the_promoted_candidate_into_the_spec_changes_nothing_that_runs(rollout):
    await rollout.step()
    await rollout.step(sm.PASS)
    await rollout.step(sm.PASS)
    rollout.cluster.mark_deployments_ready()
    await rollout.step()
    await rollout.step()
    before = copy.deepcopy(rollout.cluster.get("Deployment", "voice", "demo-on-demand"))

    # What the GitOps repository does next: the candidate becomes the stable image.
    rollout.obj["spec"]["runtime"]["image"] = CANDIDATE_IMAGE
    del rollout.obj["spec"]["canary"]
    rollout.cluster.requests.clear()
    await rollout.step()
    applied = [target for verb, target in rollout.cluster.writes if verb == "apply"]
    assert "Deployment/demo-on-demand" not in applied
    assert rollout.cluster.get("Deployment", "voice", "demo-on-demand")["spec"] == before["spec"]


async def test_failures_beyond_the_limit_roll_back_to_zero_candidate_pods(rollout):
    await rollout.step()
    await rollout.step(sm.FAIL)
    assert rollout.canary["phase"] == sm.PROGRESSING and rollout.canary["failures"] == 1
    await rollout.step(sm.FAIL)
    assert rollout.canary["phase"] == sm.ROLLED_BACK
    assert rollout.replicas() == {"demo-canary-on-demand": 0, "demo-on-demand": 5}
    assert rollout.image("demo-on-demand") == STABLE_IMAGE
    assert rollout.obj["status"]["canaryWeight"] == 0
    degraded = rollout.condition("Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryRolledBack")
    assert ("Warning", "CanaryRolledBack") in [(t, r) for t, r, _ in rollout.cluster.events]
    assert rollout.states[-1] == "rolled_back"

    rollout.cluster.mark_deployments_ready()
    await rollout.step()
    assert rollout.condition("Ready")["status"] == "True", "stable serves everything and is ready"
    await rollout.step()  # final: no further analysis is scripted, none runs


async def test_an_idle_canary_is_inconclusive_then_paused_not_promoted(rollout):
    await rollout.step()
    await rollout.step(sm.INCONCLUSIVE)
    assert rollout.canary["phase"] == sm.PROGRESSING and rollout.canary["step"] == 1
    await rollout.step(sm.INCONCLUSIVE)
    assert rollout.canary["phase"] == sm.PAUSED
    assert rollout.condition("CanaryProgressing")["status"] == "False"
    assert rollout.condition("CanaryProgressing")["reason"] == sm.PAUSED
    assert rollout.replicas()["demo-canary-on-demand"] == 1, "paused holds the weight"
    assert rollout.states[-1] == "paused"


async def test_abort_annotation_rolls_back_and_is_handled_once(rollout):
    await rollout.step()
    rollout.obj["metadata"]["annotations"] = {sm.ACTION_ANNOTATION: sm.ABORT}
    await rollout.step()
    assert rollout.canary["phase"] == sm.ROLLED_BACK
    assert rollout.canary["handledAction"].startswith("abort@")
    rolled_back = rollout.event_reasons().count("CanaryRolledBack")
    await rollout.step()
    assert rollout.event_reasons().count("CanaryRolledBack") == rolled_back


async def test_promote_annotation_skips_the_remaining_steps(rollout):
    await rollout.step()
    rollout.obj["metadata"]["annotations"] = {sm.ACTION_ANNOTATION: sm.PROMOTE}
    await rollout.step()
    assert rollout.canary["phase"] == sm.PROMOTING
    assert rollout.image("demo-on-demand") == CANDIDATE_IMAGE


async def test_gateway_api_routes_follow_the_steps(fake_cluster):
    fake_cluster.served.add(("gateway.networking.k8s.io/v1", "HTTPRoute"))
    rollout = Rollout(fake_cluster, body())

    def weights():
        route = fake_cluster.get("HTTPRoute", "voice", "demo")
        return {ref["name"]: ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]}

    await rollout.step()
    assert weights() == {"demo-stable": 80, "demo-canary": 20}
    assert fake_cluster.names("Service") == ["demo", "demo-canary", "demo-stable"]
    canary_service = fake_cluster.get("Service", "voice", "demo-canary")
    assert canary_service["spec"]["selector"]["ttsfleet.io/track"] == "canary"
    await rollout.step(sm.PASS)
    assert weights() == {"demo-stable": 40, "demo-canary": 60}
    await rollout.step(sm.FAIL)
    await rollout.step(sm.FAIL)
    assert weights() == {"demo-stable": 100, "demo-canary": 0}


async def test_without_gateway_api_no_route_is_rendered_and_traffic_follows_replicas(rollout):
    await rollout.step()
    assert rollout.cluster.names("HTTPRoute") == []
    assert rollout.cluster.names("Service") == ["demo"]


async def test_the_operator_never_writes_the_spec_or_metadata_of_the_service(rollout):
    await rollout.step()
    await rollout.step(sm.PASS)
    rollout.obj["metadata"]["annotations"] = {sm.ACTION_ANNOTATION: sm.ABORT}
    await rollout.step()
    touched = {target for verb, target in rollout.cluster.writes if verb in ("apply", "delete")}
    assert not any(target.startswith("TTSService/") for target in touched)


async def test_percent_zero_is_no_canary(fake_cluster):
    obj = body()
    obj["spec"]["canary"]["percent"] = 0
    rollout = Rollout(fake_cluster, obj)
    await rollout.step()
    assert (
        rollout.deployments() == ["demo-on-demand"]
        and rollout.image("demo-on-demand") == STABLE_IMAGE
    )


async def test_a_route_under_explicit_gateway_api_traffic_is_kept_current_not_recreated(
    fake_cluster,
):
    fake_cluster.served.add(("gateway.networking.k8s.io/v1", "HTTPRoute"))
    obj = body()
    obj["spec"]["canary"]["traffic"] = "GatewayAPI"
    rollout = Rollout(fake_cluster, obj)
    await rollout.step()
    await rollout.step(sm.INCONCLUSIVE)  # weight held: the listed route matches its rendering
    route_writes = [
        target for verb, target in fake_cluster.writes if target.startswith("HTTPRoute/")
    ]
    assert route_writes == ["HTTPRoute/demo"]


async def test_removing_the_canary_deletes_its_route_and_services(fake_cluster):
    fake_cluster.served.add(("gateway.networking.k8s.io/v1", "HTTPRoute"))
    rollout = Rollout(fake_cluster, body())
    await rollout.step()
    assert fake_cluster.names("HTTPRoute") == ["demo"]
    del rollout.obj["spec"]["canary"]
    await rollout.step()
    assert fake_cluster.names("HTTPRoute") == []
    assert fake_cluster.names("Service") == ["demo"]


async def test_a_service_without_routes_lists_none_again_until_it_renders_one(fake_cluster):
    # Where the cluster serves Gateway API, a pass once listed HTTPRoutes for every
    # service (the kind is not watched): 1,000 requests a period for routes nobody has.
    fake_cluster.served.add(("gateway.networking.k8s.io/v1", "HTTPRoute"))
    obj = body()
    canary = obj["spec"].pop("canary")
    rollout = Rollout(fake_cluster, obj)

    def route_lists():
        return fake_cluster.requests.count(("list", "HTTPRoute"))

    await rollout.step()
    await rollout.step()
    await rollout.step()
    assert route_lists() == 1
    rollout.obj["spec"]["canary"] = canary  # renders a route: listed again from now on
    await rollout.step()
    assert fake_cluster.names("HTTPRoute") == ["demo"]
    await rollout.step(sm.INCONCLUSIVE)
    assert route_lists() == 2
    del rollout.obj["spec"]["canary"]  # the route is stale: the pass that lists it deletes it
    await rollout.step()
    assert fake_cluster.names("HTTPRoute") == []
    await rollout.step()
    assert route_lists() == 3
