"""A small model of the scheduler's filters (nodeSelector, required node affinity,
taints and tolerations, extended resources), and the e2e cluster's fake node pools to
evaluate it over. The e2e suite checks the real scheduler."""

import pathlib

import pytest
import yaml

NODES_FILE = pathlib.Path(__file__).resolve().parents[2] / "e2e" / "cluster" / "nodes.yaml"


def nodes() -> list[dict]:
    if not NODES_FILE.exists():
        pytest.skip(f"{NODES_FILE} (the e2e cluster's node pools) is missing")
    return [
        doc
        for doc in yaml.safe_load_all(NODES_FILE.read_text())
        if doc and doc.get("kind") == "Node"
    ]


def expression_holds(expression: dict, node_labels: dict) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    if operator == "In":
        return node_labels.get(key) in values
    if operator == "NotIn":
        return node_labels.get(key) not in values
    if operator == "Exists":
        return key in node_labels
    if operator == "DoesNotExist":
        return key not in node_labels
    raise AssertionError(f"operator {operator} not modelled")


def tolerated(taint: dict, tolerations: list[dict]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, taint["effect"]):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, taint["key"]):
            return True
        if toleration.get("key") == taint["key"] and toleration.get("value") == taint.get("value"):
            return True
    return False


def fits(pod: dict, node: dict) -> bool:
    node_labels = node["metadata"].get("labels", {})
    if any(node_labels.get(k) != v for k, v in pod.get("nodeSelector", {}).items()):
        return False
    required = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required and not any(
        all(expression_holds(e, node_labels) for e in term["matchExpressions"])
        for term in required["nodeSelectorTerms"]
    ):
        return False
    for taint in node["spec"].get("taints") or []:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerated(
            taint, pod.get("tolerations", [])
        ):
            return False
    allocatable = node["status"]["allocatable"]
    for resource, amount in pod["containers"][0]["resources"]["requests"].items():
        if resource.startswith("nvidia.com/") and int(allocatable.get(resource, 0)) < int(amount):
            return False
    return True
