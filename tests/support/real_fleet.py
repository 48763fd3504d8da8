"""The product on the local cluster's real node, for the e2e tests of e2e/fleet.

The real node (hack/cluster.sh starts a kubelet, containerd, runc, CNI and kube-proxy
next to the kwok fake GPU nodes) runs the project's own images, built here with no
registry by hack/images.sh and imported into its containerd. Pods of `gpu.class: cpu`
land there (label and taint ttsfleet.io/cpu-serving); their checkpoint is a tiny random
one in the official layout, on a hostPath volume of that node bound to a claim, as an
offline cluster's pre-filled volume would be.

Helpers here: the images, the checkpoint volume, the operator installed by the chart as a
pod from its image, and streaming clients that record what each stream received.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from support.operator_fixtures import CHART, helm_path
from support.runtime import write_tiny_checkpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_SH = REPO_ROOT / "hack" / "images.sh"
CLUSTER_SH = REPO_ROOT / "hack" / "cluster.sh"
CPU_SERVING_KEY = "ttsfleet.io/cpu-serving"
# What the pods mount: `ttsfleet-runtime checkpoint --random --size tiny` in a folder of its name.
CHECKPOINT_NAME = "tiny-customvoice"
SAMPLE_RATE = 24000
PCM_BYTES_PER_SECOND = SAMPLE_RATE * 2


def cache_dir() -> Path:
    return Path(os.environ.get("TTSFLEET_CACHE") or Path.home() / ".cache" / "ttsfleet")


def _run(*cmd: str, timeout: float = 3600) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip()


def node_image(name: str) -> str:
    """The reference of the project's image `name` (runtime | operator), built if its inputs
    changed and imported into the real node's containerd; pods use it with no registry."""
    archive = _run(str(IMAGES_SH), "archive", name)
    _run(str(CLUSTER_SH), "load-image", archive, timeout=1800)
    return _run(str(IMAGES_SH), "ref", name)


def real_node_name(cluster) -> str:
    nodes = cluster.get("nodes", "-l", f"{CPU_SERVING_KEY}=true")["items"]
    assert nodes, (
        f"no node labelled {CPU_SERVING_KEY}=true: hack/cluster.sh up starts the real node"
    )
    return nodes[0]["metadata"]["name"]


def write_checkpoint(root: Path) -> Path:
    """The tiny random checkpoint under root/CHECKPOINT_NAME, written once and
    readable by the pods' non-root user."""
    folder = root / CHECKPOINT_NAME
    done = root / f".{CHECKPOINT_NAME}.written"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        write_tiny_checkpoint(folder)
        done.touch()
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def checkpoint_volume(namespace: str, claim: str, node: str, host_path: Path) -> list[dict]:
    """A PersistentVolume on the real node's disk and the claim bound to it by name."""
    volume = f"{namespace}-{claim}"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": namespace, "name": claim},
                "hostPath": {"path": str(host_path), "type": "Directory"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [node],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def install_operator_pod(
    cluster, release: str, namespace: str, watch: list[str], image: str
) -> None:
    """The chart as a user installs it, with the operator image built here: its pod runs on
    the real node as the chart's ServiceAccount, watching `watch` only."""
    repository, tag = image.rsplit(":", 1)
    args = [
        helm_path(),
        "upgrade",
        "--install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "resyncSeconds=5",
        # One operator pod: the 2-core node's room is for the runtime pods, and the tests
        # here look at the pod that made the fleet (two replicas: e2e/test_operator_failover.py).
        "--set",
        "replicaCount=1",
        "--set",
        "leaderElection.enabled=false",
        "--set-string",
        f"nodeSelector.{CPU_SERVING_KEY.replace('.', chr(92) + '.')}=true",
        "--set",
        f"tolerations[0].key={CPU_SERVING_KEY}",
        "--set",
        "tolerations[0].operator=Exists",
        "--set",
        "tolerations[0].effect=NoSchedule",
    ]
    for index, name in enumerate(watch):
        args += ["--set", f"watchNamespaces[{index}]={name}"]
    _run(*args, timeout=300)


def api_key(cluster, service: str, namespace: str) -> str:
    """The first key of the Secret the pods check: its lines are `KEY` or `TENANT: KEY`
    (the operator writes `default: KEY`), read as the runtime reads them."""
    from ttsfleet_runtime.server.auth import parse_key_line

    secret = cluster.get("secret", f"{service}-api-keys", "-n", namespace)
    first = base64.b64decode(secret["data"]["keys"]).decode().splitlines()[0]
    return parse_key_line(first)[1]


def service_url(cluster, service: str, namespace: str) -> str:
    """The TTSService's ClusterIP, reached from this host through kube-proxy's rules."""
    svc = cluster.get("service", service, "-n", namespace)
    port = svc["spec"]["ports"][0]["port"]
    return f"http://{svc['spec']['clusterIP']}:{port}"


@dataclass
class StreamResult:
    started: float
    ended: float
    status: int | None
    received: int
    error: str | None = None


@dataclass
class StreamingLoad:
    """`callers` threads, each streaming PCM speech back to back through `url` until
    stopped, every stream read to its end; what each stream received is recorded. A stream
    that ends short of `full_bytes`, or fails, was cut."""

    url: str
    key: str
    model: str
    callers: int
    full_bytes: int
    results: list[StreamResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.callers)
        ]

    def _run(self, caller: int) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        # A new connection for each stream: each is balanced by kube-proxy afresh, as a
        # fleet's clients are.
        n = 0
        while not self._stopping.is_set():
            body = {
                "model": self.model,
                "voice": "vivian",
                "input": f"Caller {caller}, sentence {n}.",
                "response_format": "pcm",
            }
            result = StreamResult(time.monotonic(), 0.0, None, 0)
            try:
                with httpx.stream(
                    "POST", f"{self.url}/v1/audio/speech", json=body, headers=headers, timeout=60
                ) as response:
                    result.status = response.status_code
                    for chunk in response.iter_bytes():
                        result.received += len(chunk)
            except httpx.HTTPError as exc:
                result.error = f"{type(exc).__name__}: {exc}"
            result.ended = time.monotonic()
            with self._lock:
                self.results.append(result)
            n += 1

    def start(self) -> StreamingLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def cut(self) -> list[StreamResult]:
        """Streams that began (status 200) and did not receive all their audio."""
        return [r for r in self.results if r.status == 200 and r.received != self.full_bytes]

    def refused(self) -> list[StreamResult]:
        """Requests that never streamed: connection errors, or a status other than 200."""
        return [r for r in self.results if r.status != 200]

    def summary(self) -> str:
        return (
            f"{len(self.results)} streams, {len(self.cut())} cut, {len(self.refused())} refused;"
            f" cut/refused: {[(r.status, r.received, r.error) for r in self.cut() + self.refused()][:10]}"
        )
