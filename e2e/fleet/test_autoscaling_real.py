"""The HPA for real: load on real pods makes the cluster's own autoscaler add a pod.

A `gpu.class: cpu` TTSService with autoscaling on (1 to 2 pods, target queue depth 1) and one
batch slot per pod runs on the real node. Prometheus scrapes its pods as the chart's
PodMonitor labels them; prometheus-adapter, built from its Go module, serves the chart's
adapter rules as the custom metrics API. Streaming clients through the Service queue
requests behind the one slot; kube-controller-manager's HPA reads the queue depth, writes
`spec.replicas` through the TTSService's /scale subresource, the operator scales the
Deployment, the kubelet starts the pod, and kube-proxy sends it requests.
"""

from __future__ import annotations

import pytest

from support.polling import wait_for
from support.real_monitoring import MonitoredFleet, PrometheusAdapter
from ttsfleet_operator import labels
from ttsfleet_runtime import metrics

# Pods start, scale and drain as the real kubelet times them: minutes, not the suite's 300 s.
pytestmark = pytest.mark.timeout(900)
MAX_REPLICAS = 2
CALLERS = 4
READY_TIMEOUT = 420
SCALE_TIMEOUT = 300


@pytest.fixture(scope="module")
def fleet(cluster, operator, tmp_path_factory):
    fleet = MonitoredFleet(
        cluster, operator, tmp_path_factory.mktemp("autoscaling-real"), "e2e-scale-hpa"
    )
    try:
        fleet.start(
            {
                "replicas": 1,
                "autoscaling": {
                    "enabled": True,
                    "minReplicas": 1,
                    "maxReplicas": MAX_REPLICAS,
                    "targetQueueDepth": 1,
                    # Nothing scales back down while the test looks.
                    "scaleDownStabilizationSeconds": 3600,
                },
                # One slot: a second concurrent stream waits, and the queue is the signal.
                "engine": {"maxBatch": 1, "maxAudioSeconds": 0.8},
                # Requests only (no CPU limit): room on the node for the second pod.
                "runtime": {"resources": {"cpu": "500m", "memory": "3Gi", "cacheSize": "1Gi"}},
            }
        )
        wait_for(lambda: len(fleet.ready_pods()) == 1, READY_TIMEOUT, 2, "the first pod Ready")
    except BaseException:
        print(fleet.describe())
        fleet.stop()
        raise
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def adapter(fleet, cluster, tmp_path_factory):
    adapter = PrometheusAdapter(
        tmp_path_factory.mktemp("prometheus-adapter"),
        cluster,
        fleet.prometheus.url,
        fleet.node_address,
        fleet.namespace,
    )
    try:
        adapter.register()
    except BaseException:
        print(adapter.log_tail())
        adapter.stop()
        raise
    yield adapter
    adapter.stop()


def test_prometheus_labels_the_runtime_pods_as_the_charts_pod_monitor_does(fleet):
    (pod,) = fleet.ready_pods()
    series = wait_for(
        lambda: fleet.prometheus.query(f'{metrics.QUEUE_DEPTH}{{namespace="{fleet.namespace}"}}'),
        60,
        what="the queue depth series of the pod",
    )
    (labelled,) = series
    assert {
        k: labelled["metric"].get(k)
        for k in ("job", "namespace", "pod", "service", "track", "pool")
    } == {
        "job": "ttsfleet-runtime",
        "namespace": fleet.namespace,
        "pod": pod,
        "service": fleet.name,
        "track": labels.STABLE,
        "pool": labels.ON_DEMAND,
    }


def test_load_makes_the_hpa_scale_the_tts_service_and_the_new_pod_serves(fleet, adapter):
    (first,) = fleet.ready_pods()
    load = fleet.load(CALLERS).start()
    try:
        # The HPA's input, as it reads it: the adapter's answer for the one pod.
        wait_for(
            lambda: adapter.pod_metric(fleet.namespace, metrics.QUEUE_DEPTH).get(first, 0) >= 1,
            120,
            what=f"the custom metrics API to report {first} queueing",
        )
        wait_for(
            lambda: fleet.tts()["spec"]["replicas"] == MAX_REPLICAS,
            SCALE_TIMEOUT,
            what=f"the HPA to ask for {MAX_REPLICAS} replicas",
            interval=2,
        )
        # The HPA wrote it, and through /scale: its field manager's entry is the scale subresource's.
        writers = {
            (entry["manager"], entry.get("subresource"))
            for entry in fleet.cluster.get(
                "tts", fleet.name, "-n", fleet.namespace, "--show-managed-fields"
            )["metadata"]["managedFields"]
        }
        assert ("kube-controller-manager", "scale") in writers, writers
        wait_for(
            lambda: len(fleet.ready_pods()) == MAX_REPLICAS,
            READY_TIMEOUT,
            what="the operator's Deployment to run the new pod, Ready",
            interval=2,
        )
        (deployment,) = fleet.deployments().values()
        assert deployment["spec"]["replicas"] == MAX_REPLICAS
        (new,) = set(fleet.ready_pods()) - {first}
        wait_for(
            lambda: fleet.prometheus.query(
                f'sum({metrics.REQUESTS}{{namespace="{fleet.namespace}",pod="{new}",route=~"/v1/.*"}}) > 0'
            ),
            120,
            what=f"requests through the Service to reach {new}",
        )
    except BaseException:
        print(fleet.describe())
        print(adapter.log_tail())
        raise
    finally:
        load.stop()
    # Scaling up cuts nothing: every stream that began got all its audio.
    assert not load.cut(), load.summary()
    hpa = fleet.cluster.get("hpa", fleet.name, "-n", fleet.namespace)
    print(f"HPA status: {hpa['status']}; load: {load.summary()}")
