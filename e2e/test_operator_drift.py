"""Level-based reconciling against a real API server: hand edits and deletions of
children are undone (a deletion at once, not at the next period), a restarted operator
resumes without duplicates, and a pass over an unchanged TTSService sends nothing: no
write, not even a list (counted by the API server itself)."""

from __future__ import annotations

import time

import pytest

from support.operator_fixtures import (
    api_requests,
    children,
    count_diff,
    deployment_replicas,
    load_sample,
    resyncs,
    tts,
    wait_ready,
    write_requests,
)
from ttsfleet_operator.render.names import deployment_name

pytestmark = pytest.mark.timeout(180)

SAMPLE = "spot.yaml"


@pytest.fixture
def service(cluster, running_operator, namespace):
    manifest = load_sample(SAMPLE)
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, manifest["metadata"]["name"], namespace)
    return manifest


def test_a_deployment_scaled_by_hand_is_scaled_back(cluster, namespace, service):
    name = service["metadata"]["name"]
    on_demand = deployment_name(name, "stable", "on-demand")
    before = deployment_replicas(cluster, name, namespace)
    cluster.kubectl("scale", f"deployment/{on_demand}", "-n", namespace, "--replicas", "7")
    cluster.wait_for(
        lambda: deployment_replicas(cluster, name, namespace) == before,
        timeout=30,
        what=f"{on_demand} scaled back to {before[on_demand]}",
    )


@pytest.mark.parametrize(("field", "timeout"), [("targetPort", 30), ("port", 12)])
def test_a_service_port_changed_by_hand_is_restored(cluster, namespace, service, field, timeout):
    """`port` is the key of the ports list: an edited entry stays beside ours under
    server-side apply, which the operator must clear (kube_cluster.KubeCluster.apply)."""
    name = service["metadata"]["name"]
    ports = cluster.get("service", name, "-n", namespace)["spec"]["ports"]
    cluster.kubectl(
        "patch",
        "service",
        name,
        "-n",
        namespace,
        "--type=json",
        "-p",
        f'[{{"op": "replace", "path": "/spec/ports/0/{field}", "value": 9999}}]',
    )

    def live():
        return cluster.get("service", name, "-n", namespace)["spec"]["ports"]

    try:
        cluster.wait_for(
            lambda: live() == ports,
            timeout=timeout,
            what=f"Service {name} ports restored to {ports}",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlive ports: {live()}") from None


@pytest.mark.parametrize(
    "kind",
    ["deployment", "configmap", "poddisruptionbudget", "horizontalpodautoscaler"],
)
def test_a_deleted_child_is_recreated(cluster, namespace, service, kind):
    name = service["metadata"]["name"]
    victim = children(cluster, f"{kind}s", name, namespace)[0]["metadata"]
    cluster.kubectl("delete", kind, victim["name"], "-n", namespace, "--wait=true")

    def recreated():
        objs = [
            o
            for o in children(cluster, f"{kind}s", name, namespace)
            if o["metadata"]["name"] == victim["name"]
        ]
        return objs and objs[0]["metadata"]["uid"] != victim["uid"]

    cluster.wait_for(recreated, timeout=30, what=f"{kind}/{victim['name']} recreated")


# Far longer than the test's timeout: only the child's watch event can bring it back.
LONG_PERIOD = ("--resync-seconds", "3600")


@pytest.mark.parametrize("kind", ["service", "configmap", "poddisruptionbudget"])
def test_a_deleted_child_comes_back_without_waiting_for_the_period(
    cluster, running_operator, namespace, kind
):
    # The operator starts before the service exists, so no pass of its start-up is still
    # to come; the second deletion follows a re-creation, so no pass a child's status
    # change asked for is either: only the deletion's own watch event can bring it back.
    running_operator.restart(namespaces=[namespace], extra_args=LONG_PERIOD)
    manifest = load_sample(SAMPLE)
    name = manifest["metadata"]["name"]
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, name, namespace)
    for _ in range(2):
        victim = children(cluster, f"{kind}s", name, namespace)[0]["metadata"]
        cluster.kubectl("delete", kind, victim["name"], "-n", namespace, "--wait=true")

        def recreated(victim=victim):
            objs = [
                o
                for o in children(cluster, f"{kind}s", name, namespace)
                if o["metadata"]["name"] == victim["name"]
            ]
            return objs and objs[0]["metadata"]["uid"] != victim["uid"]

        cluster.wait_for(recreated, timeout=30, what=f"{kind}/{victim['name']} recreated")


def test_operator_killed_mid_change_resumes_without_duplicates(
    cluster, running_operator, namespace, service
):
    name = service["metadata"]["name"]
    names_before = {
        kind: sorted(o["metadata"]["name"] for o in children(cluster, kind, name, namespace))
        for kind in (
            "deployments",
            "services",
            "configmaps",
            "poddisruptionbudgets",
            "horizontalpodautoscalers",
        )
    }

    # SIGKILL right after a change lands: nothing of it may have been applied yet.
    patch = '{"spec": {"replicas": 9, "engine": {"maxBatch": 16}}}'
    cluster.kubectl("patch", "tts", name, "-n", namespace, "--type=merge", "-p", patch)
    running_operator.kill()
    generation = tts(cluster, name, namespace)["metadata"]["generation"]
    running_operator.start()

    obj = wait_ready(cluster, name, namespace)
    assert obj["status"]["observedGeneration"] == generation
    names_after = {
        kind: sorted(o["metadata"]["name"] for o in children(cluster, kind, name, namespace))
        for kind in names_before
    }
    assert names_after == names_before, "children added or lost across the restart"
    assert sum(deployment_replicas(cluster, name, namespace).values()) == 9
    (config,) = children(cluster, "configmaps", name, namespace)
    assert "16" in config["data"].values(), config["data"]
    # One ReplicaSet per pool per pod template: the engine change rolled each pool once.
    owners = [
        rs["metadata"]["ownerReferences"][0]["name"]
        for rs in children(cluster, "replicasets", name, namespace)
    ]
    assert sorted(set(owners)) == names_after["deployments"]
    assert all(owners.count(d) <= 2 for d in set(owners)), owners


def test_a_pass_over_an_unchanged_tts_service_writes_nothing(
    cluster, running_operator, namespace, service
):
    """Counted by the API server: `apiserver_request_total` of write verbs on every kind
    the operator writes. Its metrics have no user label, so the window is kept free of
    other writers: the operator is scoped to this namespace, earlier tests' namespaces
    have finished terminating (their cleanup deletes the same kinds), and what
    controllers write (Deployment and HPA status, /scale, Events) is not counted."""
    name = service["metadata"]["name"]
    running_operator.restart(namespaces=[namespace])
    wait_ready(cluster, name, namespace)

    def terminating():
        return [
            n["metadata"]["name"]
            for n in cluster.get("namespaces")["items"]
            if n["status"].get("phase") == "Terminating"
        ]

    cluster.wait_for(
        lambda: not terminating(),
        timeout=90,
        what="earlier tests' namespaces to finish terminating",
    )
    time.sleep(resyncs(1))  # the restarted operator's first passes settle

    before = write_requests(cluster)
    lists_before = api_requests(cluster, ("LIST",))
    time.sleep(resyncs(4))
    idle = count_diff(before, write_requests(cluster))
    assert idle == {}, (
        f"writes during 4 idle resync passes: {idle}\n{running_operator.log_tail(20)}"
    )
    # Its children are read from the cache the watches keep, not listed again each pass;
    # but HTTPRoutes, listed each pass where Gateway API is served (an earlier test may
    # have installed it): the kind is not watched, as it may not exist when kopf starts.
    lists = count_diff(lists_before, api_requests(cluster, ("LIST",)))
    lists.pop(("LIST", "gateway.networking.k8s.io", "httproutes", ""), None)
    assert lists == {}, f"lists during 4 idle resync passes: {lists}"

    # The same measurement sees the operator's writes when there is something to do.
    on_demand = deployment_name(name, "stable", "on-demand")
    want = deployment_replicas(cluster, name, namespace)
    before = write_requests(cluster)
    cluster.kubectl("scale", f"deployment/{on_demand}", "-n", namespace, "--replicas", "7")
    cluster.wait_for(
        lambda: deployment_replicas(cluster, name, namespace) == want,
        timeout=30,
        what="drift repaired",
    )
    repaired = count_diff(before, write_requests(cluster))
    assert repaired.get(("APPLY", "apps", "deployments", ""), 0) >= 1, repaired
