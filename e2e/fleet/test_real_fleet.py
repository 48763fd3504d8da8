"""The product on a real node: the operator's pods run the runtime image and serve speech.

One fleet for the module, made as a platform team makes one: the chart installs the
operator, which runs as a pod from its image (built here by hack/images.sh) with the
chart's ServiceAccount and RBAC, watching one namespace; a `gpu.class: cpu` TTSService
(samples/cpu-dev.yaml) whose checkpoint comes from a claim on the real node's disk. The
kubelet, containerd, CNI and kube-proxy are real (hack/cluster.sh); only the GPU is not:
the pods serve a tiny random checkpoint on the CPU.

Each test then checks one behaviour a user relies on, through the Service's ClusterIP as
kube-proxy routes it: speech with the openai SDK and over the WebSocket, a rollout under
streaming load, and an eviction with streams in flight.
"""

from __future__ import annotations

import io
import json
import time
import uuid
import wave

import httpx
import pytest
from openai import OpenAI
from websockets.sync.client import connect

from support.operator_fixtures import load_sample
from support.polling import wait_for
from support.real_fleet import (
    PCM_BYTES_PER_SECOND,
    SAMPLE_RATE,
    StreamingLoad,
    api_key,
    cache_dir,
    checkpoint_volume,
    install_operator_pod,
    node_image,
    real_node_name,
    service_url,
    write_checkpoint,
)

# Pods start, roll and drain for real: a module's setup alone can take minutes.
pytestmark = pytest.mark.timeout(900)

SAMPLE = "cpu-dev.yaml"
OPERATOR_RELEASE = "ttsfleet-node"
REPLICAS = 2
# What samples/cpu-dev.yaml caps each utterance at (random weights never end one).
MAX_AUDIO_SECONDS = 4
READY_TIMEOUT = 420


class Fleet:
    def __init__(self, cluster, namespace: str, operator_namespace: str, name: str, node: str):
        self.cluster, self.namespace, self.name, self.node = cluster, namespace, name, node
        self.operator_namespace = operator_namespace
        self.images: dict[str, str] = {}

    def tts(self) -> dict:
        return self.cluster.get("tts", self.name, "-n", self.namespace)

    def runtime_pods(self) -> list[dict]:
        return self.cluster.get(
            "pods", "-n", self.namespace, "-l", f"ttsfleet.io/service={self.name}"
        )["items"]

    def ready_pods(self) -> list[dict]:
        return [
            pod
            for pod in self.runtime_pods()
            if not pod["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions", [])
            )
        ]

    def deployment(self) -> dict:
        (deployment,) = self.cluster.get(
            "deployments", "-n", self.namespace, "-l", f"ttsfleet.io/service={self.name}"
        )["items"]
        return deployment

    def settled(self) -> bool:
        """Every pod of the current template Ready, and no other pod left."""
        deployment = self.deployment()
        status = deployment["status"]
        want = deployment["spec"]["replicas"]
        return (
            status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == want
            and status.get("readyReplicas") == want
            and status.get("replicas") == want
            and len(self.runtime_pods()) == want
        )

    def describe(self) -> str:
        pods = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "wide", check=False)
        events = self.cluster.kubectl(
            "get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp", check=False
        )
        return f"{pods.stdout}\n{events.stdout[-3000:]}"

    @property
    def url(self) -> str:
        return service_url(self.cluster, self.name, self.namespace)

    @property
    def key(self) -> str:
        return api_key(self.cluster, self.name, self.namespace)

    def model(self) -> str:
        models = httpx.get(
            f"{self.url}/v1/models", headers={"Authorization": f"Bearer {self.key}"}, timeout=30
        )
        return models.json()["data"][0]["id"]


@pytest.fixture(scope="module")
def fleet(cluster, operator):
    # The session's operator (a local process watching every namespace) would reconcile this
    # fleet too: it pauses while the operator pod owns it.
    operator.stop()
    node = real_node_name(cluster)
    checkpoints = write_checkpoint(cache_dir() / "e2e" / "checkpoints").parent
    suffix = uuid.uuid4().hex[:5]
    namespace, operator_namespace = f"e2e-fleet-{suffix}", f"e2e-fleet-operator-{suffix}"
    cluster.kubectl("create", "namespace", namespace)
    service = load_sample(SAMPLE)
    name = service["metadata"]["name"]
    fleet = Fleet(cluster, namespace, operator_namespace, name, node)
    fleet.images = {image: node_image(image) for image in ("runtime", "operator")}
    try:
        claim = service["spec"]["model"]["source"]["pvc"]["claimName"]
        cluster.apply(checkpoint_volume(namespace, claim, node, checkpoints))
        install_operator_pod(
            cluster, OPERATOR_RELEASE, operator_namespace, [namespace], fleet.images["operator"]
        )
        spec = service["spec"]
        spec["replicas"] = REPLICAS
        spec["runtime"]["image"] = fleet.images["runtime"]
        spec["runtime"]["imagePullPolicy"] = "Never"
        # Room on a 2-core node for a rollout's surge pod next to both replicas.
        spec["runtime"]["resources"]["cpu"] = "250m"
        cluster.apply(service, "-n", namespace)
        wait_for(
            lambda: len(fleet.ready_pods()) == REPLICAS and fleet.settled(),
            READY_TIMEOUT,
            what=f"{REPLICAS} runtime pods Ready",
            interval=2,
        )
        wait_for(
            lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in fleet.tts().get("status", {}).get("conditions", [])
            ),
            60,
            what="TTSService Ready",
        )
    except BaseException:
        print(fleet.describe())
        raise
    yield fleet
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "pv", f"{namespace}-{claim}", "--wait=false", check=False)
    cluster.kubectl("delete", "namespace", operator_namespace, "--wait=false", check=False)
    operator.start()


def pcm_bytes_per_stream() -> int:
    return MAX_AUDIO_SECONDS * PCM_BYTES_PER_SECOND


def test_the_operator_runs_as_a_pod_from_its_image_with_the_charts_service_account(fleet):
    (pod,) = fleet.cluster.get(
        "pods",
        "-n",
        fleet.operator_namespace,
        "-l",
        f"app.kubernetes.io/instance={OPERATOR_RELEASE}",
    )["items"]
    assert pod["spec"]["nodeName"] == fleet.node
    assert pod["spec"]["containers"][0]["image"] == fleet.images["operator"]
    assert pod["spec"]["serviceAccountName"] == OPERATOR_RELEASE
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] and status["restartCount"] == 0
    # It is what made the fleet: the children carry its field manager's writes.
    assert fleet.tts()["status"]["readyReplicas"] == REPLICAS


def test_runtime_pods_run_the_runtime_image_on_the_real_node(fleet):
    pods = fleet.ready_pods()
    assert len(pods) == REPLICAS
    for pod in pods:
        assert pod["spec"]["nodeName"] == fleet.node
        assert pod["spec"]["containers"][0]["image"] == fleet.images["runtime"]
        assert pod["status"]["podIP"], "a pod address from the node's CNI"


def test_the_openai_sdk_streams_speech_through_the_service(fleet):
    client = OpenAI(base_url=f"{fleet.url}/v1", api_key=fleet.key, timeout=120)
    model = fleet.model()
    with client.audio.speech.with_streaming_response.create(
        model=model, voice="vivian", input="Hello from a real pod.", response_format="wav"
    ) as response:
        chunks = list(response.iter_bytes())
    assert len(chunks) > 1, "the WAV came in one piece: it was not streamed"
    data = b"".join(chunks)
    with wave.open(io.BytesIO(data)) as audio:
        assert (audio.getframerate(), audio.getnchannels(), audio.getsampwidth()) == (
            SAMPLE_RATE,
            1,
            2,
        )
    # A streamed WAV cannot know its length up front: count the samples after the header.
    assert len(data) - (data.index(b"data") + 8) == pcm_bytes_per_stream()


def test_the_websocket_streams_speech_through_the_service(fleet):
    url = fleet.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    audio = bytearray()
    with connect(
        url, additional_headers={"Authorization": f"Bearer {fleet.key}"}, open_timeout=30
    ) as socket:
        socket.send(
            json.dumps({"type": "session.config", "model": fleet.model(), "voice": "vivian"})
        )
        assert json.loads(socket.recv(timeout=30))["type"] == "session.ready"
        for delta in ("Text arrives ", "in pieces, ", "as an LLM writes it."):
            socket.send(json.dumps({"type": "text.delta", "text": delta}))
        socket.send(json.dumps({"type": "end"}))
        while True:
            message = socket.recv(timeout=120)
            if isinstance(message, bytes):
                audio += message
                continue
            event = json.loads(message)
            assert event["type"] != "error", event
            if event["type"] == "session.done":
                break
    assert len(audio) == pcm_bytes_per_stream()


def test_a_rollout_under_streaming_load_cuts_no_stream(fleet):
    before = {pod["metadata"]["name"] for pod in fleet.runtime_pods()}
    load = StreamingLoad(fleet.url, fleet.key, fleet.model(), 3, pcm_bytes_per_stream()).start()
    try:
        time.sleep(5)
        # A new engine setting: a new ConfigMap hash, so a new revision of every pod.
        fleet.cluster.kubectl(
            "patch", "tts", fleet.name, "-n", fleet.namespace, "--type", "merge",
            "-p", json.dumps({"spec": {"engine": {"firstChunkFrames": 3}}}),
        )  # fmt: skip
        wait_for(
            lambda: (
                fleet.settled()
                and not before & {pod["metadata"]["name"] for pod in fleet.runtime_pods()}
            ),
            READY_TIMEOUT,
            what="every pod replaced by the new revision",
            interval=2,
        )
        time.sleep(5)
    finally:
        load.stop()
    print(f"rollout under streaming load: {load.summary()}")
    during = [r for r in load.results if r.status == 200]
    assert len(during) >= 10, f"too little traffic to judge the rollout: {load.summary()}"
    assert not load.cut(), load.summary()
    assert not load.refused(), load.summary()


def test_an_eviction_with_streams_in_flight_loses_none(fleet):
    from kubernetes import client as k8s

    wait_for(fleet.settled, READY_TIMEOUT, what="the fleet settled")
    load = StreamingLoad(fleet.url, fleet.key, fleet.model(), 3, pcm_bytes_per_stream()).start()
    try:
        time.sleep(5)
        victim = fleet.ready_pods()[0]["metadata"]["name"]
        api = k8s.CoreV1Api(fleet.cluster.api_client())
        api.create_namespaced_pod_eviction(
            victim,
            fleet.namespace,
            k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=victim, namespace=fleet.namespace)),
        )
        wait_for(
            lambda: (
                fleet.settled()
                and victim not in {pod["metadata"]["name"] for pod in fleet.runtime_pods()}
            ),
            READY_TIMEOUT,
            what=f"{victim} evicted and replaced",
            interval=2,
        )
    finally:
        load.stop()
    print(f"eviction with streams in flight: {load.summary()}")
    assert len(load.results) >= 10, load.summary()
    assert not load.cut(), load.summary()
    assert not load.refused(), load.summary()
