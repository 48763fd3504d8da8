"""Losing a spot node: its pods come back on the spot capacity that is left, never on
on-demand nodes, and the on-demand floor serves throughout."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import yaml

from support.operator_fixtures import children, load_sample, pods_by_node, wait_ready
from ttsfleet_operator.render.names import deployment_name

pytestmark = pytest.mark.timeout(240)

NODES_FILE = Path(__file__).resolve().parent / "cluster" / "nodes.yaml"


def _node_manifest(name: str) -> dict:
    for doc in yaml.safe_load_all(NODES_FILE.read_text()):
        if doc and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"node {name} not in {NODES_FILE}")


@pytest.fixture
def restore_nodes(cluster):
    """Nodes a test deletes are created again from e2e/cluster/nodes.yaml afterwards."""
    deleted: list[str] = []
    yield deleted
    for name in deleted:
        cluster.kubectl(
            "create", "-f", "-", input=yaml.safe_dump(_node_manifest(name)), check=False
        )
        cluster.wait_for(
            lambda name=name: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (cluster.get("node", name).get("status") or {}).get("conditions") or []
            ),
            timeout=60,
            what=f"node {name} back and Ready",
        )


def _is_spot(node: dict | None) -> bool:
    return bool(node) and node["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"


def test_spot_node_lost_pods_rescheduled_on_spot_and_on_demand_floor_held(
    cluster, running_operator, namespace, restore_nodes
):
    manifest = load_sample("spot.yaml")
    name, spec = manifest["metadata"]["name"], manifest["spec"]
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, name, namespace)
    floor = spec["spot"]["minOnDemand"]
    on_demand = deployment_name(name, "stable", "on-demand")

    placed = pods_by_node(cluster, name, namespace)
    spot_pods = collections.Counter(
        node["metadata"]["name"] for _, node in placed if _is_spot(node)
    )
    victim, lost = spot_pods.most_common(1)[0]
    spot_total = sum(spot_pods.values())

    # What a cloud does when it reclaims a spot VM: the Node object goes away.
    restore_nodes.append(victim)
    cluster.kubectl("delete", "node", victim, "--wait=true")

    def settled():
        (dep,) = [
            d
            for d in children(cluster, "deployments", name, namespace)
            if d["metadata"]["name"] == on_demand
        ]
        assert (dep["status"].get("readyReplicas") or 0) >= floor, (
            f"on-demand floor broken: {dep['status']}"
        )
        now = pods_by_node(cluster, name, namespace)
        for pod, node in now:
            if pod["metadata"]["labels"]["ttsfleet.io/pool"] == "spot" and node is not None:
                assert _is_spot(node), (
                    f"spot pod {pod['metadata']['name']} on {node['metadata']['name']}"
                )
        running_spot = [
            p
            for p, node in now
            if _is_spot(node)
            and node["metadata"]["name"] != victim
            and p["status"].get("phase") == "Running"
        ]
        return len(running_spot) == spot_total and now

    # Pod garbage collection removes pods bound to a vanished node after its quarantine
    # (about 40 s); their ReplicaSets then create replacements on the spot nodes left.
    cluster.wait_for(
        settled,
        timeout=150,
        interval=2,
        what=f"{lost} pod(s) of {victim} rescheduled on other spot nodes",
    )
    obj = wait_ready(cluster, name, namespace)
    assert obj["status"]["readyReplicas"] == spec["replicas"]
