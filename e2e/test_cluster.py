"""The local control plane behaves like a real cluster: the pieces the operator's e2e
tests lean on (version, GPU node pools, scheduling, controllers, CEL) are really there."""

from __future__ import annotations

import ipaddress
import json

import pytest

H100 = "NVIDIA-H100-80GB-HBM3"
GPU_CLASSES = {H100, "NVIDIA-H200", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"}
SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "cloud.google.com/gke-spot": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SPOT_TAINT = {"key": "ttsfleet.io/spot", "value": "true", "effect": "NoSchedule"}
# What the API server (on creation) and the node lifecycle controller put on a node not yet Ready.
CONTROL_PLANE_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
GPU_AND_SPOT_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "ttsfleet.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
]


def _nodes(cluster):
    return cluster.get("nodes")["items"]


def _taints(node):
    return [
        {k: t.get(k) for k in ("key", "value", "effect")} for t in node["spec"].get("taints", [])
    ]


def _h100_spot_nodes(cluster):
    return {
        n["metadata"]["name"]
        for n in _nodes(cluster)
        if n["metadata"]["labels"].get("nvidia.com/gpu.product") == H100
        and n["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"
    }


def _gpu_deployment(name, replicas, gpus, tolerations, node_selector):
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": tolerations,
                    "containers": [
                        {
                            "name": "tts",
                            "image": "registry.invalid/ttsfleet/runtime:e2e",
                            "resources": {
                                "requests": {
                                    "cpu": "1",
                                    "memory": "1Gi",
                                    "nvidia.com/gpu": str(gpus),
                                },
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def _unschedulable(cluster, namespace: str, app: str) -> list[str]:
    """The scheduler's messages on the pods of `app` it could not place."""
    pods = cluster.get("pods", "-n", namespace, "-l", f"app={app}")["items"]
    return [
        c.get("message", "")
        for p in pods
        for c in p["status"].get("conditions", [])
        if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
    ]


def test_api_server_reports_the_pinned_version(cluster, versions):
    reported = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    if cluster.provider != "kwok":
        pytest.skip(
            f"{cluster.provider} runs its own Kubernetes version: {reported['serverVersion']['gitVersion']}"
        )
    assert reported["serverVersion"]["gitVersion"] == versions["KUBE_VERSION"]
    assert reported["clientVersion"]["gitVersion"] == versions["KUBE_VERSION"]


def test_gpu_node_pools_carry_the_labels_taints_and_capacity_users_see(cluster):
    nodes = _nodes(cluster)
    gpu_nodes = [n for n in nodes if "nvidia.com/gpu.product" in n["metadata"]["labels"]]

    assert {n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in gpu_nodes} == GPU_CLASSES
    zones = {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in gpu_nodes}
    assert len(zones) == 3
    for node in gpu_nodes:
        name, labels = node["metadata"]["name"], node["metadata"]["labels"]
        gpus = node["status"]["allocatable"]["nvidia.com/gpu"]
        assert (
            gpus == node["status"]["capacity"]["nvidia.com/gpu"] == labels["nvidia.com/gpu.count"]
        ), name
        assert int(gpus) in ((1, 4) if labels["nvidia.com/gpu.product"] == "NVIDIA-L4" else (8,)), (
            name
        )
        assert GPU_TAINT in _taints(node), name
        if labels["karpenter.sh/capacity-type"] == "spot":
            assert SPOT_LABELS.items() <= labels.items(), name
            assert SPOT_TAINT in _taints(node), name
        else:
            assert labels["karpenter.sh/capacity-type"] == "on-demand", name
            assert not set(SPOT_LABELS) - {"karpenter.sh/capacity-type"} & set(labels), name
            assert SPOT_TAINT not in _taints(node), name
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert ready.get("Ready") == "True", name
        # hack/cluster.sh up waits for the node lifecycle controller to lift these.
        assert not {t["key"] for t in _taints(node)} & CONTROL_PLANE_TAINTS, name
    for product in GPU_CLASSES:
        pools = {
            n["metadata"]["labels"]["karpenter.sh/capacity-type"]
            for n in gpu_nodes
            if n["metadata"]["labels"]["nvidia.com/gpu.product"] == product
        }
        assert pools == {"spot", "on-demand"}, product

    system = [n for n in nodes if n["metadata"]["labels"].get("ttsfleet.io/node-role") == "system"]
    assert system and all(not n["spec"].get("taints") for n in system)
    assert all("nvidia.com/gpu" not in n["status"]["allocatable"] for n in system)


def test_gpu_pods_are_scheduled_onto_the_requested_class_and_pool_and_become_ready(
    cluster, namespace
):
    h100_spot = _h100_spot_nodes(cluster)
    selector = {"nvidia.com/gpu.product": H100, "karpenter.sh/capacity-type": "spot"}
    # A whole node's 8 GPUs per pod: the scheduler must spread them one per node.
    cluster.apply(
        _gpu_deployment("tts-h100-spot", len(h100_spot), 8, GPU_AND_SPOT_TOLERATIONS, selector),
        "-n",
        namespace,
    )

    def ready_pods():
        pods = cluster.get("pods", "-n", namespace, "-l", "app=tts-h100-spot")["items"]
        ready = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        return ready if len(ready) == len(h100_spot) else None

    pods = cluster.wait_for(ready_pods, timeout=60, what="H100 spot pods Ready")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(h100_spot)
    assert all(p["status"]["phase"] == "Running" for p in pods)
    cluster.wait_for(
        lambda: (
            cluster.get("deployment", "tts-h100-spot", "-n", namespace)["status"].get(
                "readyReplicas"
            )
            == len(h100_spot)
        ),
        timeout=30,
        what="Deployment readyReplicas",
    )

    # One more replica does not fit: every H100 spot GPU is taken.
    cluster.kubectl(
        "scale", "deployment/tts-h100-spot", f"--replicas={len(h100_spot) + 1}", "-n", namespace
    )

    messages = cluster.wait_for(
        lambda: _unschedulable(cluster, namespace, "tts-h100-spot"),
        timeout=30,
        what="the extra pod to be Unschedulable",
    )
    assert "nvidia.com/gpu" in messages[0]


def test_gpu_pods_without_the_gpu_toleration_stay_off_gpu_nodes(cluster, namespace):
    cluster.apply(
        _gpu_deployment("no-toleration", 1, 1, [], {"nvidia.com/gpu.product": H100}),
        "-n",
        namespace,
    )

    messages = cluster.wait_for(
        lambda: _unschedulable(cluster, namespace, "no-toleration"),
        timeout=30,
        what="the pod to be Unschedulable",
    )
    assert "untolerated taint" in messages[0]


def test_deleting_a_deployment_garbage_collects_its_replicasets_and_pods(cluster, namespace):
    selector = {"nvidia.com/gpu.product": "NVIDIA-L4", "karpenter.sh/capacity-type": "on-demand"}
    cluster.apply(
        _gpu_deployment("tts-l4", 2, 1, GPU_AND_SPOT_TOLERATIONS[:1], selector), "-n", namespace
    )
    cluster.wait_for(
        lambda: (
            cluster.get("deployment", "tts-l4", "-n", namespace)["status"].get("readyReplicas") == 2
        ),
        timeout=60,
        what="tts-l4 ready",
    )
    rs = cluster.get("replicasets", "-n", namespace, "-l", "app=tts-l4")["items"]
    assert len(rs) == 1 and rs[0]["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    # Background propagation: the API server deletes the Deployment at once, the
    # controller-manager's garbage collector removes the ReplicaSet, then its pods.
    cluster.kubectl("delete", "deployment", "tts-l4", "-n", namespace, "--cascade=background")

    def leftovers():
        left = cluster.get("replicasets,pods", "-n", namespace, "-l", "app=tts-l4")["items"]
        return not left or None

    cluster.wait_for(leftovers, timeout=60, what="ReplicaSet and pods garbage-collected")


CEL_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "celprobes.e2e.ttsfleet.io"},
    "spec": {
        "group": "e2e.ttsfleet.io",
        "scope": "Namespaced",
        "names": {"plural": "celprobes", "singular": "celprobe", "kind": "CelProbe"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "string", "enum": ["0.6B", "1.7B"]},
                                    "variant": {"type": "string"},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.variant != 'VoiceDesign' || self.size == '1.7B'",
                                        "message": "VoiceDesign exists only at 1.7B",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_cel_validation_rules_refuse_invalid_objects(cluster, namespace):
    cluster.apply(CEL_CRD)
    try:
        cluster.kubectl(
            "wait", "--for=condition=Established", "crd/celprobes.e2e.ttsfleet.io", "--timeout=30s"
        )

        def probe(name, size):
            return {
                "apiVersion": "e2e.ttsfleet.io/v1",
                "kind": "CelProbe",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"size": size, "variant": "VoiceDesign"},
            }

        # The API server's discovery can lag Established by a moment.
        cluster.wait_for(
            lambda: (
                cluster.kubectl(
                    "apply", "-f", "-", input=json.dumps(probe("ok", "1.7B")), check=False
                ).returncode
                == 0
            ),
            timeout=30,
            what="a valid CelProbe to be accepted",
        )
        refused = cluster.kubectl(
            "apply", "-f", "-", input=json.dumps(probe("bad", "0.6B")), check=False
        )
        assert refused.returncode != 0
        assert "VoiceDesign exists only at 1.7B" in refused.stderr
    finally:
        cluster.kubectl("delete", "crd", "celprobes.e2e.ttsfleet.io", "--wait=false", check=False)


# Each TTSService has a Service (three with Gateway API traffic): a fleet of a few hundred
# needs far more ClusterIPs than kube-apiserver's default /24 holds.
SERVICES_BEYOND_A_SLASH_24 = 300


def test_the_service_range_holds_hundreds_of_services(cluster, namespace):
    if cluster.provider == "kwok":
        # The range e2e/cluster/kwokctl.yaml gives kube-apiserver, as the API server reports it.
        (cidr,) = cluster.get("servicecidr", "kubernetes")["spec"]["cidrs"]
        assert ipaddress.ip_network(cidr).num_addresses >= 2**16, cidr

    services = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"svc-{i}", "namespace": namespace},
            "spec": {"selector": {"app": f"svc-{i}"}, "ports": [{"port": 8000}]},
        }
        for i in range(SERVICES_BEYOND_A_SLASH_24)
    ]
    cluster.apply(services, "-n", namespace)
    ips = {s["spec"]["clusterIP"] for s in cluster.get("services", "-n", namespace)["items"]}
    assert len(ips) == SERVICES_BEYOND_A_SLASH_24
