"""The `cpu` class: a fleet for development and CI clusters, served on CPU nodes.

Its pods ask for no GPU, serve with `--device cpu`, land only on nodes set aside for
CPU serving (label + taint `ttsfleet.io/cpu-serving`, as the local cluster's real node
carries), and never on GPU nodes. e2e/realnode runs such pods on a real kubelet.
"""

import pytest
from pydantic import ValidationError

from support.scheduler_model import fits, nodes
from ttsfleet_operator import gpu_classes
from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.render.configmap import engine_environment
from ttsfleet_runtime import metrics
from ttsfleet_runtime.settings import SETTINGS

CPU_NODE = {
    "metadata": {
        "name": "real-0",
        "labels": {gpu_classes.CPU_SERVING_KEY: "true", "kubernetes.io/hostname": "real-0"},
    },
    "spec": {
        "taints": [{"key": gpu_classes.CPU_SERVING_KEY, "value": "true", "effect": "NoSchedule"}]
    },
    "status": {"allocatable": {"cpu": "2", "memory": "24Gi"}},
}


def by_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


def pod_spec(service) -> dict:
    (deployment,) = by_kind(render_fleet(service), "Deployment")
    return deployment["spec"]["template"]["spec"]


def test_cpu_pods_ask_for_no_gpu_and_serve_on_the_cpu(make_service):
    service = make_service(gpu={"class": "cpu"})
    container = pod_spec(service)["containers"][0]
    for part in ("requests", "limits"):
        assert gpu_classes.GPU_RESOURCE not in container["resources"][part]
    assert container["resources"]["requests"]["cpu"] == service.spec.runtime.resources.cpu
    assert engine_environment(service)[SETTINGS["device"].env] == "cpu"


def test_gpu_pods_still_ask_for_their_gpu_and_cuda(make_service):
    service = make_service(gpu={"class": "l4"})
    container = pod_spec(service)["containers"][0]
    assert container["resources"]["limits"][gpu_classes.GPU_RESOURCE] == "1"
    assert engine_environment(service)[SETTINGS["device"].env] == "cuda"


def test_cpu_pods_land_on_cpu_serving_nodes_and_on_no_gpu_node(make_service):
    pod = pod_spec(make_service(gpu={"class": "cpu"}))
    assert fits(pod, CPU_NODE)
    assert not any(fits(pod, node) for node in nodes())


def test_gpu_pods_never_land_on_a_cpu_serving_node(make_service):
    assert not fits(pod_spec(make_service(gpu={"class": "h100"})), CPU_NODE)


def test_without_the_cpu_serving_toleration_the_node_refuses_the_pod(make_service):
    # Guards the test above: the taint is what keeps other pods off the node.
    pod = pod_spec(make_service(gpu={"class": "cpu"}))
    assert not fits({**pod, "tolerations": []}, CPU_NODE)


def test_the_cpu_autoscaler_scales_on_queue_depth_alone(make_service):
    service = make_service(gpu={"class": "cpu"}, autoscaling={"enabled": True})
    (hpa,) = by_kind(render_fleet(service), "HorizontalPodAutoscaler")
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [metrics.QUEUE_DEPTH]
    gpu = make_service(gpu={"class": "l4"}, autoscaling={"enabled": True})
    (hpa,) = by_kind(render_fleet(gpu), "HorizontalPodAutoscaler")
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [
        metrics.QUEUE_DEPTH,
        metrics.GPU_UTILIZATION,
    ]


def test_a_gpu_product_on_the_cpu_class_is_refused(make_service):
    with pytest.raises(ValidationError, match="class cpu has none"):
        make_service(gpu={"class": "cpu", "product": "NVIDIA-L4"})
