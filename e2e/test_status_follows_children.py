"""A TTSService's status follows its Deployments between resync periods: pods becoming
ready, or losing their nodes, show in `kubectl get tts` within seconds, and a deleted
child Deployment is re-created at once. The operator runs with a resync period longer
than these tests may run (pytestmark), so every pass after the first one came from
a Deployment event, never from the resync loop."""

from __future__ import annotations

import pytest

from support.operator_fixtures import children, condition, load_sample, tts
from support.polling import wait_for

RESYNC_SECONDS = 600
pytestmark = pytest.mark.timeout(300)

SAMPLE = "spot.yaml"
SPOT_TAINT = "ttsfleet.io/spot"
# Generous for a loaded 2-core machine, and far inside the resync period.
FOLLOWS_WITHIN = 60


@pytest.fixture
def service(cluster, running_operator, namespace):
    """The sample, applied under an operator that resyncs only every RESYNC_SECONDS."""
    running_operator.restart(
        namespaces=[namespace], extra_args=("--resync-seconds", str(RESYNC_SECONDS))
    )
    manifest = load_sample(SAMPLE)
    cluster.apply(manifest, "-n", namespace)
    return manifest


@pytest.fixture
def spot_nodes_cordoned(cluster):
    """Cordons the spot nodes (they all carry the spot taint) when called; uncordoned afterwards."""
    names: list[str] = []

    def cordon() -> None:
        for node in cluster.get("nodes")["items"]:
            spot = any(taint.get("key") == SPOT_TAINT for taint in node["spec"].get("taints") or [])
            if spot and not node["spec"].get("unschedulable"):
                names.append(node["metadata"]["name"])
                cluster.kubectl("cordon", node["metadata"]["name"])
        assert names, f"no schedulable node with the {SPOT_TAINT} taint"

    def uncordon() -> None:
        while names:
            cluster.kubectl("uncordon", names.pop(), check=False)

    try:
        yield cordon, uncordon
    finally:
        uncordon()


def status_shows(cluster, name: str, namespace: str, ready_replicas: int, ready: str) -> dict:
    """Wait until the TTSService reports `ready_replicas` ready and condition Ready=`ready`."""

    def shows():
        obj = tts(cluster, name, namespace)
        status = obj.get("status") or {}
        ready_condition = condition(obj, "Ready") or {}
        observed = status.get("observedGeneration") == obj["metadata"]["generation"]
        matches = (
            status.get("readyReplicas") == ready_replicas and ready_condition.get("status") == ready
        )
        return obj if observed and matches else None

    def last() -> dict:
        obj = tts(cluster, name, namespace)
        return {
            "readyReplicas": (obj.get("status") or {}).get("readyReplicas"),
            "Ready": condition(obj, "Ready"),
        }

    try:
        return wait_for(
            shows,
            timeout=FOLLOWS_WITHIN,
            what=f"TTSService {name}: {ready_replicas} ready replicas, Ready={ready}",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nstatus: {last()}") from None


def test_status_follows_pods_becoming_ready_and_losing_their_nodes(
    cluster, namespace, service, spot_nodes_cordoned
):
    name, replicas = service["metadata"]["name"], service["spec"]["replicas"]
    cordon, uncordon = spot_nodes_cordoned
    # The first pass created the Deployments before any pod existed: the count below
    # comes from a pass the Deployments' status changes asked for.
    status_shows(cluster, name, namespace, replicas, "True")

    # Spot pods lose their nodes; their replacements find none (spot nodes cordoned).
    spot = children(cluster, "deployments", name, namespace)
    spot_replicas = sum(
        d["spec"]["replicas"]
        for d in spot
        if d["metadata"]["labels"].get("ttsfleet.io/pool") == "spot"
    )
    assert 0 < spot_replicas < replicas
    cordon()
    cluster.kubectl(
        "delete",
        "pods",
        "-n",
        namespace,
        "-l",
        f"ttsfleet.io/service={name},ttsfleet.io/pool=spot",
        "--wait=false",
    )
    status_shows(cluster, name, namespace, replicas - spot_replicas, "False")

    uncordon()
    status_shows(cluster, name, namespace, replicas, "True")


def test_a_deleted_deployment_is_recreated_without_waiting_for_the_resync(
    cluster, namespace, service
):
    name, replicas = service["metadata"]["name"], service["spec"]["replicas"]
    status_shows(cluster, name, namespace, replicas, "True")
    victim = children(cluster, "deployments", name, namespace)[0]["metadata"]
    cluster.kubectl("delete", "deployment", victim["name"], "-n", namespace, "--wait=true")

    def recreated():
        return [
            d
            for d in children(cluster, "deployments", name, namespace)
            if d["metadata"]["name"] == victim["name"] and d["metadata"]["uid"] != victim["uid"]
        ]

    wait_for(recreated, timeout=FOLLOWS_WITHIN, what=f"deployment/{victim['name']} recreated")
    status_shows(cluster, name, namespace, replicas, "True")
