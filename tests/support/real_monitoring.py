"""The monitoring stack a platform team runs, on the host next to the local cluster, and a
fleet on the real node for it to watch (the e2e tests of e2e/fleet that need metrics).

- Prometheus (support.prometheus) scrapes the runtime pods and labels them exactly as the
  chart's runtime PodMonitor makes the Prometheus Operator label them: the PodMonitor is
  rendered from the chart and turned into a scrape config here, so the chart stays the one
  home of those labels. The Prometheus `make tools` installs (Debian's) is built without
  Kubernetes discovery, so PodDiscovery stands in for its pod role: it lists the pods and
  writes them as file_sd targets with that role's meta labels; the relabelling is
  Prometheus's own.
- prometheus-adapter (hack/prometheus-adapter.sh builds it from its Go module) serves the
  chart's adapter rules as the custom metrics API, an aggregated API server registered by
  an APIService. It runs on the host and listens on the real node's address, and the
  APIService names an ExternalName Service of that address: kube-apiserver (a host process
  here) dials it directly. A selectorless Service with Endpoints would need kube-proxy's
  rules to carry the apiserver's own traffic to a ClusterIP; on this host that traffic
  timed out (the real node's rules are built for pod traffic).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import uuid
from pathlib import Path

import httpx
import yaml

from support.operator_fixtures import CHART, helm_path, load_sample
from support.polling import wait_for
from support.ports import free_port
from support.prometheus import Prometheus, stop_process
from support.real_fleet import (
    IMAGES_SH,
    PCM_BYTES_PER_SECOND,
    StreamingLoad,
    api_key,
    cache_dir,
    checkpoint_volume,
    node_image,
    real_node_name,
    service_url,
    write_checkpoint,
)
from ttsfleet_operator import labels

REPO_ROOT = Path(__file__).resolve().parents[2]
ADAPTER_SH = REPO_ROOT / "hack" / "prometheus-adapter.sh"
ADAPTER_RULES = CHART / "adapter" / "rules.yaml"
CUSTOM_METRICS_GROUP = "custom.metrics.k8s.io"
CUSTOM_METRICS_VERSION = "v1beta1"
CUSTOM_METRICS_API_SERVICE = f"{CUSTOM_METRICS_VERSION}.{CUSTOM_METRICS_GROUP}"
# As short as Prometheus allows: the HPA and the canary analysis wait on fresh samples.
SCRAPE_INTERVAL = "2s"
# The fleet both e2e modules start from: a cpu-class TTSService with its checkpoint on a volume.
SAMPLE = "cpu-dev.yaml"


def chart_runtime_pod_monitor(release: str = "ttsfleet") -> dict:
    """The runtime PodMonitor the chart renders with monitoring.podMonitors on."""
    proc = subprocess.run(
        [
            helm_path(),
            "template",
            release,
            str(CHART),
            "--set",
            "monitoring.podMonitors.enabled=true",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (monitor,) = [
        doc
        for doc in yaml.safe_load_all(proc.stdout)
        if doc and doc["kind"] == "PodMonitor" and doc["metadata"]["name"].endswith("-runtime")
    ]
    return monitor


def _meta_label(name: str) -> str:
    """A pod label's name as Prometheus's pod discovery spells it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabeling(rule: dict) -> dict:
    """A PodMonitor relabeling (camelCase) as a Prometheus relabel_config."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {keys.get(key, key.lower()): value for key, value in rule.items()}


def pod_monitor_scrape_configs(
    monitor: dict, targets: Path, interval: str = SCRAPE_INTERVAL
) -> list[dict]:
    """The scrape configs the Prometheus Operator generates for `monitor`, one per
    endpoint: pods as the pod role of Kubernetes discovery describes them (read from
    `targets`, which PodDiscovery writes), kept by the PodMonitor's selector and port, given
    the operator's own target labels (namespace, container, pod, job, endpoint) and then the
    PodMonitor's relabelings. Only what the chart's PodMonitors use is translated
    (matchLabels, a named port, relabelings); anything else fails here rather than scraping
    something else."""
    spec = monitor["spec"]
    assert set(spec["selector"]) == {"matchLabels"}, spec["selector"]
    keep_selected = [
        {
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_pod_label_{_meta_label(key)}",
                f"__meta_kubernetes_pod_labelpresent_{_meta_label(key)}",
            ],
            "regex": f"({re.escape(value)});true",
        }
        for key, value in spec["selector"]["matchLabels"].items()
    ]
    configs = []
    for index, endpoint in enumerate(spec["podMetricsEndpoints"]):
        unknown = set(endpoint) - {"port", "path", "interval", "relabelings", "honorLabels"}
        assert not unknown, f"PodMonitor fields this translation does not know: {unknown}"
        meta = monitor["metadata"]
        configs.append(
            {
                "job_name": f"podMonitor/{meta.get('namespace', 'default')}/{meta['name']}/{index}",
                "honor_labels": endpoint.get("honorLabels", False),
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "metrics_path": endpoint.get("path", "/metrics"),
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}],
                "relabel_configs": [
                    {
                        "action": "drop",
                        "source_labels": ["__meta_kubernetes_pod_phase"],
                        "regex": "(Failed|Succeeded)",
                    },
                    *keep_selected,
                    {
                        "action": "keep",
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": endpoint["port"],
                    },
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {
                        "source_labels": ["__meta_kubernetes_pod_container_name"],
                        "target_label": "container",
                    },
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {
                        "target_label": "job",
                        "replacement": f"{meta.get('namespace', 'default')}/{meta['name']}",
                    },
                    {"target_label": "endpoint", "replacement": endpoint["port"]},
                    *[_relabeling(rule) for rule in endpoint.get("relabelings", [])],
                ],
            }
        )
    return configs


class PodDiscovery:
    """The pod role of Prometheus's Kubernetes discovery, for a Prometheus built without it
    (Debian's, which `make tools` installs, leaves Kubernetes discovery out): a thread lists
    the pods of `namespaces` every `period` seconds and writes them as file_sd targets with
    the meta labels that role gives them, one target per container port. Prometheus then
    relabels them with the PodMonitor's own rules, as it would relabel discovered pods."""

    def __init__(self, cluster, namespaces: list[str], path: Path, period: float = 1.0):
        self.cluster, self.namespaces, self.path, self.period = cluster, namespaces, path, period
        self.path.write_text("[]")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> PodDiscovery:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stopping.is_set():
            targets = []
            for namespace in self.namespaces:
                proc = self.cluster.kubectl(
                    "get", "pods", "-n", namespace, "-o", "json", check=False
                )
                if proc.returncode == 0:
                    targets += pod_targets(json.loads(proc.stdout)["items"])
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(targets))
            tmp.replace(self.path)  # Prometheus never reads half a file
            self._stopping.wait(self.period)


def pod_targets(pods: list[dict]) -> list[dict]:
    """file_sd targets for `pods` with the pod role's `__meta_kubernetes_*` labels."""
    targets = []
    for pod in pods:
        ip = pod.get("status", {}).get("podIP")
        if not ip:
            continue
        meta = pod["metadata"]
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod["status"].get("conditions", [])
        )
        common = {
            "__meta_kubernetes_namespace": meta["namespace"],
            "__meta_kubernetes_pod_name": meta["name"],
            "__meta_kubernetes_pod_ip": ip,
            "__meta_kubernetes_pod_phase": pod["status"].get("phase", ""),
            "__meta_kubernetes_pod_ready": str(ready).lower(),
            "__meta_kubernetes_pod_node_name": pod["spec"].get("nodeName", ""),
        }
        for key, value in meta.get("labels", {}).items():
            common[f"__meta_kubernetes_pod_label_{_meta_label(key)}"] = value
            common[f"__meta_kubernetes_pod_labelpresent_{_meta_label(key)}"] = "true"
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                targets.append(
                    {
                        "targets": [f"{ip}:{port['containerPort']}"],
                        "labels": {
                            **common,
                            "__meta_kubernetes_pod_container_name": container["name"],
                            "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                            "__meta_kubernetes_pod_container_port_number": str(
                                port["containerPort"]
                            ),
                        },
                    }
                )
    return targets


class RuntimePrometheus:
    """A real Prometheus scraping the runtime pods of `namespaces` as the chart's PodMonitor
    says (pods found by PodDiscovery), ready to query."""

    def __init__(self, workdir: Path, cluster, namespaces: list[str]):
        workdir.mkdir(parents=True, exist_ok=True)
        targets = workdir / "pods.json"
        self.discovery = PodDiscovery(cluster, namespaces, targets).start()
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": pod_monitor_scrape_configs(chart_runtime_pod_monitor(), targets),
        }
        self.server = Prometheus(workdir, config)
        self.server.wait_ready()
        self.url = self.server.url
        self.query = self.server.query

    def stop(self) -> None:
        self.discovery.stop()
        self.server.stop()


def image_archive(name: str) -> Path:
    """The OCI archive of the project's image `name`, built if its inputs changed."""
    proc = subprocess.run(
        [str(IMAGES_SH), "archive", name], capture_output=True, text=True, timeout=3600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(proc.stdout.strip())


def node_internal_ip(cluster, node: str) -> str:
    (address,) = [
        a["address"]
        for a in cluster.get("node", node)["status"]["addresses"]
        if a["type"] == "InternalIP"
    ]
    return address


def adapter_binary() -> str:
    """prometheus-adapter, built once from its Go module (hack/prometheus-adapter.sh)."""
    proc = subprocess.run(
        [str(ADAPTER_SH)], capture_output=True, text=True, timeout=3600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


class PrometheusAdapter:
    """prometheus-adapter on the host with the chart's rules, registered as the cluster's
    custom metrics API (one per cluster: the APIService is cluster-wide)."""

    SERVICE = "custom-metrics-adapter"

    def __init__(self, workdir: Path, cluster, prometheus_url: str, address: str, namespace: str):
        self.cluster, self.namespace, self.address = cluster, namespace, address
        # A port free on loopback is free on every address of this host's one network namespace.
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "prometheus-adapter.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 (open while the process runs; stop() closes it)
        kubeconfig = str(cluster.kubeconfig)
        self.process = subprocess.Popen(
            [
                adapter_binary(),
                f"--secure-port={self.port}",
                f"--bind-address={address}",
                # A self-signed serving certificate, written here at start.
                f"--cert-dir={workdir / 'certs'}",
                f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--prometheus-url={prometheus_url}",
                f"--config={ADAPTER_RULES}",
                # Its default (10 min) would hide a new pod's series from the HPA that long.
                "--metrics-relist-interval=5s",
                "--v=2",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def registration(self) -> list[dict]:
        """The Service naming the adapter's address, and the APIService that points at it."""
        return [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": self.SERVICE, "namespace": self.namespace},
                # kube-apiserver resolves an ExternalName Service to that name and the
                # APIService's port and dials it directly: no endpoints, no kube-proxy.
                "spec": {"type": "ExternalName", "externalName": self.address},
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": CUSTOM_METRICS_API_SERVICE},
                "spec": {
                    "service": {
                        "name": self.SERVICE,
                        "namespace": self.namespace,
                        "port": self.port,
                    },
                    "group": CUSTOM_METRICS_GROUP,
                    "version": CUSTOM_METRICS_VERSION,
                    # The adapter's certificate is self-signed at its start.
                    "insecureSkipTLSVerify": True,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ]

    def register(self, timeout: float = 120) -> None:
        if self.process.poll() is not None:
            raise RuntimeError("prometheus-adapter exited:\n" + self.log_path.read_text())
        self.cluster.apply(self.registration())
        wait_for(
            self.available, timeout, interval=1, what="the custom metrics APIService Available"
        )

    def available(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError("prometheus-adapter exited:\n" + self.log_path.read_text())
        api_service = self.cluster.get("apiservice", CUSTOM_METRICS_API_SERVICE)
        return any(
            c["type"] == "Available" and c["status"] == "True"
            for c in api_service.get("status", {}).get("conditions", [])
        )

    def pod_metric(self, namespace: str, metric: str) -> dict[str, float]:
        """The custom metrics API's value of `metric` per pod of `namespace`, as the HPA reads it."""
        path = (
            f"/apis/{CUSTOM_METRICS_GROUP}/{CUSTOM_METRICS_VERSION}"
            f"/namespaces/{namespace}/pods/*/{metric}"
        )
        proc = self.cluster.kubectl("get", "--raw", path, check=False)
        if proc.returncode != 0:
            return {}
        return {
            item["describedObject"]["name"]: _quantity(item["value"])
            for item in json.loads(proc.stdout)["items"]
        }

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.cluster.kubectl(
            "delete", "apiservice", CUSTOM_METRICS_API_SERVICE, "--ignore-not-found", check=False
        )
        stop_process(self.process, self.log)


def _quantity(value: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes values ("3", "1500m")."""
    suffixes = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    if value and value[-1] in suffixes:
        return float(value[:-1]) * suffixes[value[-1]]
    return float(value)


class MonitoredFleet:
    """A `gpu.class: cpu` TTSService (samples/cpu-dev.yaml) on the real node in a namespace
    of its own, reconciled by the session's operator process (watching that namespace
    only), and the Prometheus that scrapes its pods."""

    def __init__(self, cluster, operator, workdir: Path, prefix: str):
        self.cluster, self.operator, self.workdir = cluster, operator, workdir
        self.namespace = f"{prefix}-{uuid.uuid4().hex[:5]}"
        self.service = load_sample(SAMPLE)
        self.name = self.service["metadata"]["name"]
        self.node = real_node_name(cluster)
        self.node_address = node_internal_ip(cluster, self.node)
        self.claim = self.service["spec"]["model"]["source"]["pvc"]["claimName"]
        self.prometheus: RuntimePrometheus | None = None

    def start(self, spec: dict, analysis: bool = False) -> None:
        """Namespace, checkpoint volume and Prometheus; the operator watching the namespace
        (with `analysis`, querying that Prometheus for the canary analysis); then the
        TTSService with `spec` merged over the sample's and the runtime image built here."""
        checkpoints = write_checkpoint(cache_dir() / "e2e" / "checkpoints").parent
        image = node_image("runtime")
        self.cluster.kubectl("create", "namespace", self.namespace)
        self.cluster.apply(checkpoint_volume(self.namespace, self.claim, self.node, checkpoints))
        self.prometheus = RuntimePrometheus(
            self.workdir / "prometheus", self.cluster, [self.namespace]
        )
        flags = ("--prometheus-url", self.prometheus.url) if analysis else ()
        self.operator.restart([self.namespace], flags)
        merged = self.service["spec"]
        merged["runtime"]["image"] = image
        merged["runtime"]["imagePullPolicy"] = "Never"
        for key, value in spec.items():
            merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) else value
        self.cluster.apply(self.service, "-n", self.namespace)

    def stop(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        self.cluster.kubectl(
            "delete", "pv", f"{self.namespace}-{self.claim}", "--wait=false", check=False
        )
        # Back to the session's operator as the other modules expect it.
        self.operator.restart()

    def tts(self) -> dict:
        return self.cluster.get("tts", self.name, "-n", self.namespace)

    def pods(self, track: str | None = None) -> list[dict]:
        selector = f"{labels.SERVICE}={self.name}"
        if track:
            selector += f",{labels.TRACK}={track}"
        return self.cluster.get("pods", "-n", self.namespace, "-l", selector)["items"]

    def ready_pods(self, track: str | None = None) -> list[str]:
        return sorted(
            pod["metadata"]["name"]
            for pod in self.pods(track)
            if not pod["metadata"].get("deletionTimestamp")
            and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions", [])
            )
        )

    def deployments(self) -> dict[str, dict]:
        items = self.cluster.get(
            "deployments", "-n", self.namespace, "-l", f"{labels.SERVICE}={self.name}"
        )["items"]
        return {d["metadata"]["name"]: d for d in items}

    def endpoint(self) -> tuple[str, str, str]:
        """(URL, API key, model id) of the Service, as a client reaches it through
        kube-proxy's rules on this host."""
        url = service_url(self.cluster, self.name, self.namespace)
        key = api_key(self.cluster, self.name, self.namespace)
        models = httpx.get(
            f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        return url, key, models.json()["data"][0]["id"]

    def load(self, callers: int) -> StreamingLoad:
        """Streaming clients through the Service, each reading every stream to its end
        (engine.maxAudioSeconds of PCM: a whole number of 80 ms frames, e.g. 0.8 s; the
        engine ends an utterance on a frame, so 1 s would stream 13 frames, 1.04 s)."""
        seconds = self.tts()["spec"]["engine"]["maxAudioSeconds"]
        return StreamingLoad(*self.endpoint(), callers, round(seconds * PCM_BYTES_PER_SECOND))

    def describe(self) -> str:
        pods = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "wide", check=False)
        events = self.cluster.kubectl(
            "get", "events", "-n", self.namespace, "--sort-by=.lastTimestamp", check=False
        )
        return f"{pods.stdout}\n{events.stdout[-3000:]}\noperator:\n{self.operator.log_tail(40)}"
