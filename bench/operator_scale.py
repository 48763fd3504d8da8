"""The operator at scale: N TTSServices applied at once on the local control plane.

    TTSFLEET_CLUSTER_NAME=bench TTSFLEET_REAL_NODE=0 python3 bench/operator_scale.py \
        --services 1000 --changes 20 --out bench/results/operator-scale.json

(`make bench-operator SERVICES=1000`). It starts the local kwok cluster (hack/cluster.sh up,
unless it runs), a fresh namespace, and `ttsfleet operator run` as a subprocess of its
own (so RSS and CPU seconds are the operator's), then measures:

- bulk: N TTSServices created at once (16 concurrent POSTs), then the time until every child the renderer
  gives each of them exists (ConfigMap, Deployment, Service, PDB, HPA);
- changes: under that load, one spec change at a time (the runtime's memory request, so
  the Deployment's rendered-hash annotation changes), change -> that Deployment rewritten;
- idle: over whole resync periods with nothing changing, the operator's API requests
  and writes per pass, from its own counter (`ttsfleet_operator_api_requests_total`,
  every request its API client sends; kopf's watches are long-lived streams, not passes);
- the operator's RSS (peak, end) and CPU seconds, from /proc.

With --apiserver-ceiling it starts no operator and sends a first pass's writes itself, 16
services at once: the API server's own rate on this machine (docs/operator-scale.md).

Children are counted with metadata-only lists (PartialObjectMetadataList), so polling them
costs the API server little. JSON (machine, versions, raw samples) goes to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SH = ROOT / "hack" / "cluster.sh"
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# kind -> collection path under /namespaces/<ns>/, for the kinds a bench service renders.
PATHS = {
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
}
RENDERED_HASH = "ttsfleet.io/rendered-hash"
CREATE_THREADS = 16
MANAGED = "app.kubernetes.io/managed-by=ttsfleet-operator"


def progress(message: str) -> None:
    print(f"[bench-operator {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def service_manifest(name: str, namespace: str, memory_gi: int = 16) -> dict:
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"size": "0.6B", "variant": "Base"},
            "gpu": {"class": "l4"},
            "replicas": 1,
            "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4},
            "runtime": {"resources": {"cpu": "2", "memory": f"{memory_gi}Gi"}},
        },
    }


def expected_children(manifest: dict) -> set[tuple[str, str]]:
    """(kind, name) of every child the operator renders for `manifest`, from the renderer."""
    from ttsfleet_operator.canary.plan import plan
    from ttsfleet_operator.render import render_fleet
    from ttsfleet_operator.tts_service import TTSService

    body = {**manifest, "metadata": {**manifest["metadata"], "uid": "bench"}}
    service = TTSService.model_validate(body)
    return {(m["kind"], m["metadata"]["name"]) for m in render_fleet(service, plan(service, None))}


class Api:
    """Metadata-only reads of the bench namespace (the `kubernetes` client's HTTP session)."""

    def __init__(self, kubeconfig: str, namespace: str):
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        configuration.connection_pool_maxsize = CREATE_THREADS
        self.client = client.ApiClient(configuration)
        self.namespace = namespace

    def _get(self, path: str, accept: str, query=None) -> dict | None:
        import urllib.parse

        url = self.client.configuration.host + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": accept}
        token = self.client.configuration.api_key.get("authorization")
        if token:
            headers["Authorization"] = token
        response = self.client.call_api("GET", url, header_params=headers)
        response.read()
        if response.status == 404:
            return None
        return json.loads(response.data)

    def create_service(self, manifest: dict) -> None:
        url = f"{self.client.configuration.host}/apis/ttsfleet.io/v1alpha1/namespaces/{self.namespace}/ttsservices"
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        token = self.client.configuration.api_key.get("authorization")
        if token:
            headers["Authorization"] = token
        response = self.client.call_api("POST", url, header_params=headers, body=manifest)
        response.read()
        if response.status != 201:
            raise RuntimeError(
                f"creating TTSService {manifest['metadata']['name']}: {response.data[:300]}"
            )

    def names(self, kind: str) -> set[str]:
        path = PATHS[kind].format(ns=self.namespace)
        result = self._get(path, METADATA_ONLY, [("labelSelector", MANAGED)])
        return {item["metadata"]["name"] for item in (result or {}).get("items") or []}

    def deployment_versions(self) -> dict[str, str]:
        """Name -> resourceVersion of every bench Deployment (metadata only)."""
        path = PATHS["Deployment"].format(ns=self.namespace)
        result = self._get(path, METADATA_ONLY, [("labelSelector", MANAGED)])
        return {
            item["metadata"]["name"]: item["metadata"]["resourceVersion"]
            for item in (result or {}).get("items") or []
        }

    def service_statuses(self) -> dict[str, dict]:
        """Name -> status of every bench TTSService."""
        path = f"/apis/ttsfleet.io/v1alpha1/namespaces/{self.namespace}/ttsservices"
        result = self._get(path, "application/json")
        return {
            item["metadata"]["name"]: item.get("status") or {}
            for item in (result or {}).get("items") or []
        }

    def rendered_hash(self, kind: str, name: str) -> str | None:
        path = PATHS[kind].format(ns=self.namespace) + "/" + name
        result = self._get(path, METADATA_ONE)
        return ((result or {}).get("metadata", {}).get("annotations") or {}).get(RENDERED_HASH)


class Operator:
    """`ttsfleet operator run` in a process of its own, for its RSS, CPU and /metrics."""

    def __init__(self, kubeconfig: str, namespace: str, resync_seconds: float, log_path: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT / "runtime")]),
        }
        self.log = log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "ttsfleet_operator.cli", "operator", "run",
                "--namespace", namespace, "--kubeconfig", kubeconfig,
                "--resync-seconds", str(resync_seconds), "--metrics-port", str(self.port),
                "--liveness", "",
            ],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.rss_samples: list[tuple[float, float]] = []

    def metrics(self) -> dict[str, float]:
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10).read()
        values = {}
        for line in text.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the operator exited ({self.process.returncode}): see {self.log.name}"
                )
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(
            f"the operator's /metrics did not answer in {timeout}s: see {self.log.name}"
        )

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)

    def sample(self, t0: float) -> None:
        self.rss_samples.append((round(time.monotonic() - t0, 2), round(self.rss_mb(), 1)))

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


# The control plane's processes, by the name of their binary: the bulk's CPU per process
# says whether the time goes to the API server (and etcd) or to the operator.
CONTROL_PLANE = (
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok-controller",
)


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def control_plane_pids(match: str) -> dict[str, int]:
    """Binary name -> pid of each control-plane process on this host whose command line
    contains `match` (the kwok cluster's own directory, so another session's cluster on
    the same machine is not counted); empty where the control plane runs elsewhere."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        binary = os.path.basename(argv[0].decode(errors="replace"))
        if binary in CONTROL_PLANE and match in b" ".join(argv).decode(errors="replace"):
            found[binary] = int(entry.name)
    return found


def cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    seconds = {}
    for name, pid in pids.items():
        try:
            seconds[name] = process_cpu_seconds(pid)
        except OSError:
            continue
    return seconds


def cpu_delta(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    return {name: round(end[name] - start[name], 1) for name in end if name in start}


def requests_by_verb(metrics: dict[str, float]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for name, value in metrics.items():
        match = re.match(r"ttsfleet_operator_api_requests_total\{(.*)\}", name)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            counts[f"{labels['verb']} {labels['resource']}"] = value
    return counts


def passes(metrics: dict[str, float]) -> float:
    return sum(
        v for k, v in metrics.items()
        if k.startswith("ttsfleet_operator_reconcile_duration_seconds_count")
    )  # fmt: skip


def kubectl(kubectl_path: str, kubeconfig: str, *args: str, input: str | None = None) -> str:
    proc = subprocess.run(
        [kubectl_path, "--kubeconfig", kubeconfig, *args],
        input=input, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()[:500]}")
    return proc.stdout


def changed_fields(before: dict[str, dict], after: dict[str, dict]) -> dict[str, int]:
    """Status field (conditions by type) -> how many services it changed for."""
    counts: dict[str, int] = {}
    for name, status in after.items():
        old = before.get(name) or {}
        fields = {
            key
            for key in {*status, *old}
            if key != "conditions" and status.get(key) != old.get(key)
        }
        old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
        for condition in status.get("conditions") or []:
            previous = old_conditions.get(condition.get("type"))
            if previous != condition:
                changed = sorted(
                    k
                    for k in {*condition, *(previous or {})}
                    if condition.get(k) != (previous or {}).get(k)
                )
                fields.add(f"conditions[{condition.get('type')}].{'/'.join(changed)}")
        for field in fields:
            counts[field] = counts.get(field, 0) + 1
    return counts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def apiserver_ceiling(
    kubeconfig: str, namespace: str, services: int, concurrency: int
) -> dict:
    """What a first pass writes (the keys Secret, a server-side apply of each rendered
    child, one Event) for `services` services, `concurrency` at once, over the operator's
    own client, with no operator running: the API server's own rate on this machine."""
    from ttsfleet_operator import drift
    from ttsfleet_operator.canary.plan import plan
    from ttsfleet_operator.kube_cluster import KubeCluster
    from ttsfleet_operator.render import api_keys, render_fleet
    from ttsfleet_operator.tts_service import TTSService

    counts: dict[str, int] = {}

    def count(verb: str, resource: str) -> None:
        counts[f"{verb} {resource}"] = counts.get(f"{verb} {resource}", 0) + 1

    cluster = await KubeCluster.connect(kubeconfig, count)
    # The Event's subject: the namespace (the services here are not objects).
    subject = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "namespace": namespace, "uid": ""},
    }
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(services):
        queue.put_nowait(i)

    async def first_pass_writes(i: int) -> None:
        manifest = service_manifest(f"raw-{i:04d}", namespace)
        service = TTSService.model_validate(
            {**manifest, "metadata": {**manifest["metadata"], "uid": f"raw-{i}"}}
        )
        await cluster.create(api_keys.render_api_keys_secret(service, api_keys.new_api_key()))
        for child in render_fleet(service, plan(service, None)):
            await cluster.apply(drift.with_rendered_hash(child))
        await cluster.emit_event(subject, "Normal", "Created", f"raw service {i}")

    async def worker() -> None:
        while not queue.empty():
            await first_pass_writes(queue.get_nowait())

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    await cluster.close()
    total = sum(counts.values())
    return {
        "services": services,
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "requests": counts,
        "requests_per_service": round(total / services, 2),
        "requests_per_second": round(total / elapsed, 1),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=1000, help="TTSServices applied at once")
    parser.add_argument("--changes", type=int, default=20, help="spec changes, one after another")
    parser.add_argument("--resync-seconds", type=float, default=30.0, help="the operator's period")
    parser.add_argument("--idle-periods", type=int, default=2, help="resync periods measured idle")
    parser.add_argument(
        "--timeout-s", type=float, default=600.0, help="give up waiting for children"
    )
    parser.add_argument("--namespace", default="bench-operator")
    parser.add_argument("--label", default="", help="what is measured (e.g. a commit or 'before')")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--apiserver-ceiling",
        action="store_true",
        help="no operator: send a first pass's writes for each service, 16 at once, and "
        "measure the API server's rate (what share of the bulk's time is the operator's)",
    )
    parser.add_argument(
        "--kubeconfig",
        default="",
        help="an existing cluster's kubeconfig: no hack/cluster.sh, kubectl from PATH "
        "(a bigger machine's control plane)",
    )
    parser.add_argument(
        "--control-plane-match",
        default=None,
        help="count the CPU of control-plane processes on this host whose command line "
        "contains this (default: the kwok cluster's directory; with --kubeconfig, any)",
    )
    parser.add_argument(
        "--settle-quiet-s",
        type=float,
        default=20.0,
        help="before the idle periods, wait until no Deployment has changed for this long, "
        "so that an idle write is one with nothing changed",
    )
    parser.add_argument(
        "--settle-timeout-s", type=float, default=600.0, help="give up waiting to settle"
    )
    args = parser.parse_args(argv)
    # Stopped from outside (a background run): still stop the operator, delete the namespace.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    env = dict(os.environ)
    if args.kubeconfig:
        kubeconfig = args.kubeconfig
        kubectl_path = "kubectl"
        match = args.control_plane_match or ""
    else:
        running = subprocess.run([str(CLUSTER_SH), "status"], env=env, capture_output=True)
        if running.returncode != 0:
            progress("starting the cluster (hack/cluster.sh up)")
            subprocess.run([str(CLUSTER_SH), "up"], env=env, check=True, capture_output=True)
        kubeconfig = subprocess.run(
            [str(CLUSTER_SH), "kubeconfig"], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
        bin_dir = subprocess.run(
            [str(ROOT / "hack" / "build-control-plane.sh"), "--print-bin-dir"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        kubectl_path = str(Path(bin_dir) / "kubectl")
        if not Path(kubectl_path).exists():
            kubectl_path = "kubectl"
        # The kwok cluster's binaries run from its own directory (hack/cluster.sh).
        cluster_name = os.environ.get("TTSFLEET_CLUSTER_NAME", "ttsfleet")
        match = args.control_plane_match or f"/clusters/{cluster_name}/"
    control_plane = control_plane_pids(match)
    versions = json.loads(kubectl(kubectl_path, kubeconfig, "version", "-o", "json"))
    ns = args.namespace
    progress(f"fresh namespace {ns}")
    kubectl(
        kubectl_path, kubeconfig, "delete", "namespace", ns, "--ignore-not-found", "--wait=true"
    )
    kubectl(kubectl_path, kubeconfig, "create", "namespace", ns)

    if args.apiserver_ceiling:
        progress(f"no operator: {args.services} services' first-pass writes, 16 at once")
        try:
            result = asyncio.run(apiserver_ceiling(kubeconfig, ns, args.services, CREATE_THREADS))
        finally:
            kubectl(kubectl_path, kubeconfig, "delete", "namespace", ns, "--wait=true")
        result["kubernetes"] = versions.get("serverVersion", {}).get("gitVersion")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        progress(f"{result['requests_per_second']} requests a second; wrote {args.out}")
        return 0

    names = [f"bench-{i:04d}" for i in range(args.services)]
    manifests = [service_manifest(name, ns) for name in names]
    expected = {name: expected_children(m) for name, m in zip(names, manifests, strict=True)}
    kinds = sorted({kind for children in expected.values() for kind, _ in children})
    wanted = {kind: {c for n in names for k, c in expected[n] if k == kind} for kind in kinds}
    api = Api(kubeconfig, ns)

    log_path = args.out.with_suffix(".operator.log")
    operator = Operator(kubeconfig, ns, args.resync_seconds, log_path)
    result: dict = {
        "label": args.label,
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "kubernetes": versions.get("serverVersion", {}).get("gitVersion"),
        "services": args.services,
        "children_per_service": {kind: len(wanted[kind]) // args.services for kind in kinds},
        "resync_seconds": args.resync_seconds,
        # The machine is shared: how busy it was says how far the times compare.
        "load_average_start": os.getloadavg(),
    }  # fmt: skip
    try:
        operator.wait_ready()
        t_start = time.monotonic()
        cpu_start = operator.cpu_seconds()
        control_plane_start = cpu_by_process(control_plane)
        result["rss_mb_start"] = round(operator.rss_mb(), 1)
        progress(
            f"operator up (pid {operator.process.pid}, RSS {result['rss_mb_start']} MB); "
            f"creating {args.services} TTSServices"
        )
        t0 = time.monotonic()
        # At once: POSTs from CREATE_THREADS threads (kubectl creates a List one by one,
        # throttled by its own client, ~5 a second here).
        with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(api.create_service, manifests))
        result["create_s"] = round(time.monotonic() - t0, 2)
        progress(f"created in {result['create_s']} s; waiting for every child")
        curve = []
        while True:
            missing = {kind: len(wanted[kind] - api.names(kind)) for kind in kinds}
            elapsed = time.monotonic() - t0
            operator.sample(t_start)
            curve.append((round(elapsed, 2), sum(missing.values())))
            if not any(missing.values()):
                break
            if elapsed > args.timeout_s:
                raise RuntimeError(f"children still missing after {args.timeout_s}s: {missing}")
            if len(curve) % 5 == 0:
                progress(
                    f"{elapsed:.0f} s: missing {missing}, RSS {operator.rss_samples[-1][1]} MB"
                )
            time.sleep(1.0)
        result["all_children_s"] = round(time.monotonic() - t0, 2)
        result["cpu_seconds_bulk"] = round(operator.cpu_seconds() - cpu_start, 1)
        result["cpu_seconds_bulk_by_process"] = {
            "operator": result["cpu_seconds_bulk"],
            **cpu_delta(control_plane_start, cpu_by_process(control_plane)),
        }
        progress(f"CPU seconds of the bulk by process: {result['cpu_seconds_bulk_by_process']}")
        result["missing_curve"] = curve
        progress(f"every child exists {result['all_children_s']} s after the create began")

        samples = []
        for i in range(args.changes):
            name = names[(i * 7919) % len(names)]
            deployment = next(c for k, c in expected[name] if k == "Deployment")
            before = api.rendered_hash("Deployment", deployment)
            patch = json.dumps({"spec": {"runtime": {"resources": {"memory": f"{17 + i}Gi"}}}})
            t0 = time.monotonic()
            kubectl(
                kubectl_path,
                kubeconfig,
                "-n",
                ns,
                "patch",
                "tts",
                name,
                "--type",
                "merge",
                "-p",
                patch,
            )
            while api.rendered_hash("Deployment", deployment) == before:
                if time.monotonic() - t0 > 120:
                    raise RuntimeError(
                        f"Deployment {deployment} unchanged 120 s after its TTSService changed"
                    )
                time.sleep(0.05)
            samples.append(round(time.monotonic() - t0, 3))
            progress(f"change {i + 1}/{args.changes}: {name} -> Deployment in {samples[-1]} s")
        result["change_to_children_s"] = {
            "p50": percentile(samples, 0.5), "p99": percentile(samples, 0.99),
            "mean": round(statistics.mean(samples), 3) if samples else None, "samples": samples,
        }  # fmt: skip

        # An idle period counts only where nothing changes: the controller-manager, the
        # scheduler and kwok update the Deployments for a while after they exist (replica
        # sets, pods scheduled or not, available or not), and a status the TTSService shows
        # that changes is a status write. Settled: no Deployment changed for a while.
        t_settle = time.monotonic()
        versions, quiet_since = api.deployment_versions(), time.monotonic()
        while time.monotonic() - quiet_since < args.settle_quiet_s:
            if time.monotonic() - t_settle > args.settle_timeout_s:
                raise RuntimeError(f"Deployments still changing after {args.settle_timeout_s}s")
            time.sleep(2.0)
            now = api.deployment_versions()
            changed = sum(1 for name, version in now.items() if versions.get(name) != version)
            if changed:
                progress(f"settle: {changed} Deployments changed in the last poll")
                versions, quiet_since = now, time.monotonic()
        result["settle_s"] = round(time.monotonic() - t_settle, 1)
        progress(f"settled: no Deployment changed for {args.settle_quiet_s} s")
        progress(f"idle: {args.idle_periods} resync periods of {args.resync_seconds} s")
        time.sleep(args.resync_seconds)  # let the changes' own passes and events settle
        before_metrics = operator.metrics()
        statuses_before, versions_before = api.service_statuses(), api.deployment_versions()
        time.sleep(args.resync_seconds * args.idle_periods)
        after_metrics = operator.metrics()
        statuses_after, versions_after = api.service_statuses(), api.deployment_versions()
        operator.sample(t_start)
        start_counts, end_counts = requests_by_verb(before_metrics), requests_by_verb(after_metrics)
        delta = {
            k: end_counts[k] - start_counts.get(k, 0)
            for k in end_counts
            if end_counts[k] - start_counts.get(k, 0)
        }
        idle_passes = passes(after_metrics) - passes(before_metrics)
        writes = sum(v for k, v in delta.items() if not k.startswith("GET"))
        result["idle"] = {
            "seconds": args.resync_seconds * args.idle_periods,
            "passes": idle_passes,
            "requests": delta,
            "requests_per_pass": round(sum(delta.values()) / idle_passes, 2) if idle_passes else None,
            "writes_per_pass": round(writes / idle_passes, 3) if idle_passes else None,
            "passes_per_service_per_period": round(idle_passes / args.services / args.idle_periods, 2),
            # What changed while idle: Deployments (the cluster's doing), and which status
            # fields the writes changed (a write with nothing changed shows none).
            "deployments_changed": sum(
                1 for name, version in versions_after.items() if versions_before.get(name) != version
            ),
            "status_fields_changed": changed_fields(statuses_before, statuses_after),
        }  # fmt: skip
        result["requests_total"] = end_counts
        result["rss_mb_peak"] = max(r for _, r in operator.rss_samples)
        result["rss_mb_end"] = operator.rss_samples[-1][1]
        result["rss_samples"] = operator.rss_samples
        result["cpu_seconds"] = round(operator.cpu_seconds() - cpu_start, 1)
        result["cpu_seconds_by_process"] = {
            "operator": result["cpu_seconds"],
            **cpu_delta(control_plane_start, cpu_by_process(control_plane)),
        }
        result["load_average_end"] = os.getloadavg()
        progress(
            f"idle: {result['idle']['requests_per_pass']} requests, "
            f"{result['idle']['writes_per_pass']} writes per pass; "
            f"RSS peak {result['rss_mb_peak']} MB, CPU {result['cpu_seconds']} s"
        )  # fmt: skip
    finally:
        operator.stop()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        # Waited for: an operator started later (the e2e's, another run's) would find
        # hundreds of TTSServices terminating and queue its work behind theirs.
        progress(f"wrote {args.out}; deleting namespace {ns} (minutes at N=1000)")
        kubectl(kubectl_path, kubeconfig, "delete", "namespace", ns, "--wait=true")
    return 0


if __name__ == "__main__":
    sys.exit(main())
