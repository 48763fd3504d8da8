"""The operator's own metrics move with its reconcile passes.

Passes run against the operator tests' FakeCluster (no API server runs in unit
tests; the e2e suite has a real one), loaded from tests/operator/conftest.py so
there is one fake API, not two.
"""

import importlib.util
import pathlib
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ttsfleet_operator import metrics
from ttsfleet_operator.cluster import ApiError
from ttsfleet_operator.metrics import OperatorMetrics
from ttsfleet_operator.reconcile import Reconciler

_spec = importlib.util.spec_from_file_location(
    "operator_test_fixtures", pathlib.Path(__file__).parents[1] / "operator" / "conftest.py"
)
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
FakeCluster = _fixtures.FakeCluster


CANARY = {"percent": 25, "candidate": {"image": "ghcr.io/ttsfleet/runtime:2.0"}}


def body(name="demo", namespace="voice", **spec):
    spec.setdefault("model", {"size": "1.7B", "variant": "CustomVoice"})
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-" + name, "generation": 1},
        "spec": spec,
    }


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def operator_metrics():
    return OperatorMetrics()


@pytest.fixture
def reconcile(cluster, operator_metrics):
    return operator_metrics.instrument(
        Reconciler(cluster, now=lambda: "2026-11-21T16:00:00Z").reconcile
    )


def sample(m: OperatorMetrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


async def test_a_pass_is_timed_and_its_fleet_shows_in_the_gauges(reconcile, operator_metrics):
    await reconcile(body(replicas=3, spot={"ratio": 0.5, "minOnDemand": 1}))

    m = operator_metrics
    assert sample(m, metrics.RECONCILE_DURATION + "_count", result="ok") == 1
    assert sample(m, metrics.RECONCILE_DURATION + "_sum", result="ok") > 0
    replicas = {
        pool: sample(
            m, metrics.REPLICAS, namespace="voice", service="demo", track="stable", pool=pool
        )
        for pool in ("on-demand", "spot")
    }
    assert replicas == {"on-demand": 2, "spot": 1}
    assert sample(m, metrics.ON_DEMAND_FLOOR, namespace="voice", service="demo") == 1
    managed = {
        kind: sample(m, metrics.MANAGED_OBJECTS, kind=kind)
        for kind in ("TTSService", "Deployment", "Service")
    }
    assert managed == {"TTSService": 1, "Deployment": 2, "Service": 1}


async def test_managed_objects_count_what_the_pass_rendered_under_gateway_api(
    reconcile, operator_metrics, cluster
):
    # traffic Auto on a cluster that serves Gateway API: the pass renders the track
    # Services and the HTTPRoute, so the gauge counts them.
    cluster.served.add(("gateway.networking.k8s.io/v1", "HTTPRoute"))
    await reconcile(body(replicas=4, canary=CANARY))

    m = operator_metrics
    managed = {
        kind: sample(m, metrics.MANAGED_OBJECTS, kind=kind) for kind in ("Service", "HTTPRoute")
    }
    assert managed == {"Service": 3, "HTTPRoute": 1}
    assert cluster.names("HTTPRoute") == ["demo"]


async def test_canary_gauges_show_the_state_after_the_pass(reconcile, operator_metrics):
    # The first pass starts the rollout: its candidate Deployment and its state show at once,
    # not one pass later.
    await reconcile(body(replicas=4, canary=CANARY))

    m = operator_metrics
    canary = sample(
        m, metrics.REPLICAS, namespace="voice", service="demo", track="canary", pool="on-demand"
    )
    stable = sample(
        m, metrics.REPLICAS, namespace="voice", service="demo", track="stable", pool="on-demand"
    )
    assert (canary, stable) == (1, 3)
    assert (
        sample(m, metrics.CANARY_STATE, namespace="voice", service="demo", state="progressing") == 1
    )
    assert sample(m, metrics.MANAGED_OBJECTS, kind="Deployment") == 2


async def test_managed_objects_add_up_over_services_and_the_floor_is_capped_by_replicas(
    reconcile, operator_metrics
):
    await reconcile(body("a", replicas=1))
    await reconcile(body("b", replicas=2, spot={"ratio": 0.5, "minOnDemand": 5}))

    m = operator_metrics
    assert sample(m, metrics.MANAGED_OBJECTS, kind="TTSService") == 2
    assert (
        sample(m, metrics.MANAGED_OBJECTS, kind="Deployment") == 3
    )  # a: on-demand; b: on-demand + spot
    assert sample(m, metrics.ON_DEMAND_FLOOR, namespace="voice", service="b") == 2
    assert (
        sample(m, metrics.REPLICAS, namespace="voice", service="b", track="stable", pool="spot")
        == 0
    )


async def test_a_refused_apply_counts_an_error_for_that_kind(reconcile, operator_metrics, cluster):
    cluster.fail_apply_kinds.add("Deployment")
    outcome = await reconcile(body())

    assert outcome.problem.reason == "ApplyFailed"
    m = operator_metrics
    labels = {
        "namespace": "voice",
        "service": "demo",
        "reason": "ApplyFailed",
        "kind": "Deployment",
    }
    assert sample(m, metrics.RECONCILE_ERRORS, **labels) == 1
    assert sample(m, metrics.RECONCILE_DURATION + "_count", result="error") == 1
    assert sample(m, metrics.RECONCILE_DURATION + "_count", result="ok") is None

    cluster.fail_apply_kinds.clear()
    await reconcile(body())
    assert sample(m, metrics.RECONCILE_ERRORS, **labels) == 1
    assert sample(m, metrics.RECONCILE_DURATION + "_count", result="ok") == 1


async def test_an_invalid_spec_counts_as_invalid_and_keeps_the_last_valid_fleet(
    reconcile, operator_metrics
):
    await reconcile(body(replicas=2))
    broken = body(replicas=2)
    broken["spec"]["model"]["size"] = "7B"
    await reconcile(broken)

    m = operator_metrics
    invalid = {
        "namespace": "voice",
        "service": "demo",
        "reason": "InvalidSpec",
        "kind": "TTSService",
    }
    assert sample(m, metrics.RECONCILE_ERRORS, **invalid) == 1
    # The invalid spec was not applied: the Deployments of the last valid one still run.
    assert (
        sample(
            m, metrics.REPLICAS, namespace="voice", service="demo", track="stable", pool="on-demand"
        )
        == 2
    )


async def test_without_the_api_keys_secret_no_fleet_counts_as_managed(
    cluster, reconcile, operator_metrics
):
    async def refuse(manifest):
        raise ApiError(403, "secrets is forbidden")

    cluster.create = refuse
    await reconcile(body(replicas=2))

    m = operator_metrics
    failed = {"namespace": "voice", "service": "demo", "reason": "ApiKeysSecretFailed"}
    assert sample(m, metrics.RECONCILE_ERRORS, **failed, kind="Secret") == 1
    # Nothing was applied: no Deployment, replicas or floor for it.
    assert cluster.names("Deployment") == []
    assert sample(m, metrics.MANAGED_OBJECTS, kind="Deployment") in (None, 0)
    assert (
        sample(
            m, metrics.REPLICAS, namespace="voice", service="demo", track="stable", pool="on-demand"
        )
        is None
    )


async def test_a_pass_that_raises_is_counted_and_the_exception_still_propagates(operator_metrics):
    async def broken(_body):
        raise RuntimeError("API client bug")

    with pytest.raises(RuntimeError):
        await operator_metrics.instrument(broken)(body())
    m = operator_metrics
    raised = {"namespace": "voice", "service": "demo", "reason": "Exception", "kind": "TTSService"}
    assert sample(m, metrics.RECONCILE_ERRORS, **raised) == 1
    assert sample(m, metrics.RECONCILE_DURATION + "_count", result="exception") == 1


def test_canary_state_is_one_for_the_current_state_only(operator_metrics):
    operator_metrics.set_canary_state("voice", "demo", "progressing")
    operator_metrics.set_canary_state("voice", "demo", "rolled_back")

    values = {
        state: sample(
            operator_metrics, metrics.CANARY_STATE, namespace="voice", service="demo", state=state
        )
        for state in metrics.CANARY_STATES
    }
    assert values == {
        state: (1 if state == "rolled_back" else 0) for state in metrics.CANARY_STATES
    }
    with pytest.raises(ValueError):
        operator_metrics.set_canary_state("voice", "demo", "rolledBack")


async def test_a_deleted_service_leaves_no_series_behind(reconcile, operator_metrics, cluster):
    cluster.fail_apply_kinds.add("Service")
    await reconcile(body("gone"))
    await reconcile(body("kept"))
    operator_metrics.set_canary_state("voice", "gone", "promoted")

    operator_metrics.forget("voice", "gone")

    text = operator_metrics.render().decode()
    assert 'service="gone"' not in text
    assert 'service="kept"' in text
    assert sample(operator_metrics, metrics.MANAGED_OBJECTS, kind="TTSService") == 1


async def test_metrics_are_served_over_http_with_every_catalogued_name(
    reconcile, operator_metrics, cluster
):
    cluster.fail_apply_kinds.add("Service")
    await reconcile(body())
    operator_metrics.set_canary_state("voice", "demo", "none")
    # The API client counts each request it sends (kube_cluster.py); the stand-in cluster
    # here sends none, so one is counted as the client would.
    operator_metrics.count_request("GET", "ttsservices")
    server = operator_metrics.serve(0, "127.0.0.1")
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{server.server_port}/metrics", timeout=10
        ) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    names = {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }
    for name in metrics.ALL:
        wanted = name + "_count" if name == metrics.RECONCILE_DURATION else name
        assert wanted in names, name


def test_leader_gauge_follows_leadership_and_each_change_counts_one_transition(operator_metrics):
    operator_metrics.set_leader(False)  # a follower starting up: no transition yet
    assert sample(operator_metrics, metrics.LEADER) == 0
    assert sample(operator_metrics, metrics.LEADER_TRANSITIONS) == 0
    operator_metrics.set_leader(True)
    operator_metrics.set_leader(True)  # told again: not a change
    assert sample(operator_metrics, metrics.LEADER) == 1
    assert sample(operator_metrics, metrics.LEADER_TRANSITIONS) == 1
    operator_metrics.set_leader(False)
    assert sample(operator_metrics, metrics.LEADER) == 0
    assert sample(operator_metrics, metrics.LEADER_TRANSITIONS) == 2
