"""The Helm chart: lint, render, validate, and RBAC that is exactly what the operator uses.

Runs the real `helm` binary (installed by hack/install-tools.sh into
$TTSFLEET_CACHE/tools/bin, which `make unit` puts on PATH).
"""

import json
import pathlib
import subprocess

import jsonschema
import kubernetes_validate
import pytest
import yaml

from support.tools import tool
from ttsfleet_operator import child_kinds

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ttsfleet"
# The supported range's oldest minor (Chart.yaml's kubeVersion) through the newest schemas.
KUBERNETES_VERSIONS = ["1.34", "1.35", "1.36", "1.37"]


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=120)


def template(*args: str) -> list[dict]:
    result = helm("template", "ttsfleet", str(CHART), "--namespace", "ttsfleet-system", *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_helm_lint_strict_passes():
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "watchNamespaces={voice,music}", "--set", "verbose=true"],
        ["--set", "replicaCount=1", "--set", "leaderElection.enabled=false"],
    ],
)
def test_every_rendered_manifest_is_valid_kubernetes(values):
    manifests = template(*values)
    assert {m["kind"] for m in manifests} >= {"ServiceAccount", "Deployment"}
    for manifest in manifests:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)


def test_crds_ship_with_the_chart_and_match_the_generated_one():
    manifests = template("--include-crds")
    (crd,) = [m for m in manifests if m["kind"] == "CustomResourceDefinition"]
    assert crd == yaml.safe_load((REPO / "crds" / "ttsservices.ttsfleet.io.yaml").read_text())


def rules_by_resource(rules: list[dict]) -> dict[str, set[str]]:
    granted: dict[str, set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault(f"{group}/{resource}", set()).update(rule["verbs"])
    return granted


def expected_rules() -> dict[str, set[str]]:
    expected = {
        "ttsfleet.io/ttsservices": {"list", "watch"},
        "ttsfleet.io/ttsservices/status": {"patch"},
        "/events": {"create"},
    }
    for child in child_kinds.ALL:
        expected[f"{child.group}/{child.plural}"] = {"list", "create", "patch", "delete"}
        if child.watched:  # kopf lists, then watches, the children handlers.py registers on
            expected[f"{child.group}/{child.plural}"] |= {"list", "watch"}
    # Created, never read (get would read every Secret's data), patched or deleted.
    for child in child_kinds.CREATED_ONCE:
        expected[f"{child.group}/{child.plural}"] = {"create"}
    return expected


def test_cluster_role_grants_exactly_what_the_operator_requests():
    (role,) = [m for m in template() if m["kind"] == "ClusterRole"]
    assert rules_by_resource(role["rules"]) == expected_rules()
    (binding,) = [m for m in template() if m["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ttsfleet", "namespace": "ttsfleet-system"}
    ]


def test_watching_namespaces_uses_namespaced_roles_only():
    manifests = template("--set", "watchNamespaces={voice,music}")
    kinds = [m["kind"] for m in manifests]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    # The leader-election Lease's Role lives in the release namespace, apart.
    roles = [
        m
        for m in manifests
        if m["kind"] == "Role" and not m["metadata"]["name"].endswith("-leader-election")
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["music", "voice"]
    assert all(rules_by_resource(r["rules"]) == expected_rules() for r in roles)
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert (
        "--namespace=voice" in args
        and "--namespace=music" in args
        and "--all-namespaces" not in args
    )


def test_operator_pod_is_restricted_and_probed_on_kopf_liveness():
    (deployment,) = [m for m in template() if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/ttsfleet/operator:0.1.0"
    assert container["command"] == ["ttsfleet"] and container["args"][:2] == ["operator", "run"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert (
        pod["securityContext"]["runAsNonRoot"]
        and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "resyncSeconds=0"],
        ["--set", "image.pullPolicy=Sometimes"],
        ["--set", "watchNamespaces={Bad_NS}"],
        ["--set", "unknownValue=1"],
        # Two replicas that both act would fight over every TTSService.
        ["--set", "leaderElection.enabled=false"],
        ["--set", "replicaCount=0"],
    ],
)
def test_values_schema_refuses_bad_values(bad):
    result = helm("template", "ttsfleet", str(CHART), *bad)
    assert result.returncode != 0
    assert (
        "values don't meet the specifications of the schema" in result.stderr
        or "schema" in result.stderr
    )


def test_default_values_satisfy_the_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


def test_operator_pod_runs_as_the_operator_images_user():
    import re

    dockerfile = (REPO / "Dockerfile.operator").read_text()
    (user,) = re.findall(r"^USER (\d+)", dockerfile, flags=re.MULTILINE)
    (deployment,) = [m for m in template() if m["kind"] == "Deployment"]
    assert str(deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]) == user


def test_two_replicas_elect_a_leader_by_default():
    manifests = template()
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    # A new pod starts as a follower; the old leader hands the Lease over as it stops.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {
        "--leader-election",
        "--leader-election-namespace=$(POD_NAMESPACE)",
        "--leader-election-lease=ttsfleet-operator",
    } <= set(container["args"])
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )


def test_a_disruption_budget_keeps_one_replica_through_drains():
    manifests = template()
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    (budget,) = [m for m in manifests if m["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["metadata"]["namespace"] == "ttsfleet-system"


def test_lease_rbac_grants_create_and_the_named_lease_only():
    manifests = template()
    (role,) = [m for m in manifests if m["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "ttsfleet-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["ttsfleet-operator"],
            "verbs": ["get", "update"],
        },
    ]
    (binding,) = [m for m in manifests if m["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ttsfleet", "namespace": "ttsfleet-system"}
    ]


def test_one_replica_without_election_renders_neither_lease_rbac_nor_budget():
    manifests = template("--set", "replicaCount=1", "--set", "leaderElection.enabled=false")
    kinds = {m["kind"] for m in manifests}
    assert not kinds & {"Role", "RoleBinding", "PodDisruptionBudget"}
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert not any(arg.startswith("--leader-election") for arg in container["args"])
    assert "affinity" not in deployment["spec"]["template"]["spec"]


def test_chart_states_the_supported_kubernetes_range():
    oldest = KUBERNETES_VERSIONS[0]
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == f">={oldest}.0-0"
    assert helm("template", "ttsfleet", str(CHART), "--kube-version", f"{oldest}.0").returncode == 0
    older = f"1.{int(oldest.split('.')[1]) - 1}.9"
    refused = helm("template", "ttsfleet", str(CHART), "--kube-version", older)
    assert refused.returncode != 0 and "kubeVersion" in refused.stderr, refused.stderr


def test_helm_renders_for_a_supported_kubernetes_without_being_told():
    """`make tools` builds helm with the Kubernetes version of its client-go (as helm's own
    release builds do), so a plain `helm template` meets the chart's kubeVersion; built
    without it, helm renders for v1.20.0 and refuses the chart."""
    rendered = helm("template", "ttsfleet", str(CHART))
    assert rendered.returncode == 0, rendered.stderr
