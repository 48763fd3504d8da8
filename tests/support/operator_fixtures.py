"""The operator as users install it, for the e2e tests.

The chart goes in with `helm upgrade --install` (CRDs, ServiceAccount, RBAC, the
operator Deployment) into `ttsfleet-system`. kwok has no kubelets, so the chart's
operator pod is only a fake Running pod; the operator that really works runs here as a
local process, authenticated AS THE CHART'S ServiceAccount (a token from
`kubectl create token`): every test therefore also proves the chart's RBAC is enough.

Fixtures: `operator_install` (session: the chart and the ServiceAccount kubeconfig),
`operator` (session: the running process, `restart()` / `stop()`; its log is attached to
the report of a failing test). Helpers the tests share live here too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from support.tools import tool
from ttsfleet_operator import child_kinds

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "ttsfleet"
SAMPLES = REPO_ROOT / "samples"
RELEASE = "ttsfleet"
SYSTEM_NAMESPACE = "ttsfleet-system"
# The chart names its ServiceAccount after the release's full name ("ttsfleet").
SERVICE_ACCOUNT = "ttsfleet"
RESYNC_SECONDS = 2.0
API = "ttsfleet.io/v1alpha1"
KIND = "TTSService"


def helm_path() -> str:
    return tool("helm")


def ttsfleet_path() -> str:
    beside = Path(sys.executable).parent / "ttsfleet"
    found = str(beside) if beside.exists() else shutil.which("ttsfleet")
    assert found, "no `ttsfleet` command: pip install -e '.[operator,test]'"
    return found


def install_chart(cluster, helm: str | None = None) -> None:
    """`helm upgrade --install` the chart as a user would (idempotent)."""
    proc = subprocess.run(
        [
            helm or helm_path(),
            "upgrade",
            "--install",
            RELEASE,
            str(CHART),
            "--namespace",
            SYSTEM_NAMESPACE,
            "--create-namespace",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--set",
            f"resyncSeconds={int(RESYNC_SECONDS)}",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"helm upgrade --install failed:\n{proc.stderr}{proc.stdout}")


def service_account_kubeconfig(cluster, path: Path, duration: str = "6h") -> Path:
    """A kubeconfig for the chart's ServiceAccount: the admin one's server and CA, a token."""
    token = cluster.kubectl(
        "create",
        "token",
        SERVICE_ACCOUNT,
        "-n",
        SYSTEM_NAMESPACE,
        "--duration",
        duration,
    ).stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    user = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": server}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


class Operator:
    """`ttsfleet operator run` as a local process with the ServiceAccount's kubeconfig."""

    def __init__(self, kubeconfig: Path, log_path: Path, resync_seconds: float = RESYNC_SECONDS):
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.resync_seconds = resync_seconds
        self.namespaces: list[str] | None = None
        # Flags beyond the fixture's own (e.g. `--prometheus-url URL`), kept until a start without them.
        self.extra_args: tuple[str, ...] = ()
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, namespaces: list[str] | None = None, extra_args: tuple[str, ...] = ()) -> None:
        assert self.proc is None or self.proc.poll() is not None, "operator already running"
        self.namespaces = namespaces
        self.extra_args = tuple(extra_args)
        scope = [arg for ns in namespaces for arg in ("-n", ns)] if namespaces else ["-A"]
        cmd = [
            ttsfleet_path(),
            "operator",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            *scope,
            "--resync-seconds",
            str(self.resync_seconds),
            "--metrics-port",
            "0",
            "--liveness",
            "",
            *self.extra_args,
        ]
        self._log = open(self.log_path, "a")  # noqa: SIM115 (kept open while the process runs)
        self._log.write(f"\n===== {time.strftime('%H:%M:%S')} start: {' '.join(cmd)}\n")
        self._log.flush()
        # Its own session: a Ctrl-C in the terminal reaches pytest, which stops it cleanly.
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM (kopf finishes its handlers and exits), SIGKILL if it hangs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            # A SIGTERM before kopf has set up its signal handlers kills it outright:
            # give it the moment it needs to be stoppable cleanly.
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.proc.poll() is None and not self._started():
                time.sleep(0.2)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        code = self.proc.returncode
        if self._log:
            self._log.write(f"===== {time.strftime('%H:%M:%S')} stopped (exit {code})\n")
            self._log.close()
            self._log = None
        self.proc = None
        return code

    def _started(self) -> bool:
        text = self.log_path.read_text(errors="replace")
        return "Initial authentication has finished" in text[text.rfind("===== ") :]

    def restart(
        self, namespaces: list[str] | None = None, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.stop()
        self.start(namespaces, extra_args)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as when a node dies under the operator."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.stop()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 80) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no operator log)"


@dataclass
class OperatorInstall:
    kubeconfig: Path


def dev_operator_pid() -> int | None:
    """The pid of a `hack/dev.sh` operator still running, if any."""
    cache = Path(os.environ.get("TTSFLEET_CACHE", Path.home() / ".cache" / "ttsfleet"))
    try:
        pid = int((cache / "dev" / "operator.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def dev_operator_pod() -> bool:
    """Whether `make dev` left the chart's operator pod running on the real node."""
    cache = Path(os.environ.get("TTSFLEET_CACHE", Path.home() / ".cache" / "ttsfleet"))
    return (cache / "dev" / "operator.pod").exists()


@pytest.fixture(scope="session")
def operator_install(cluster, tmp_path_factory) -> OperatorInstall:
    # Two operators on one cluster both write: the tests would measure them both.
    pid = dev_operator_pid()
    if pid:
        pytest.fail(
            f"hack/dev.sh's operator still runs (pid {pid}): stop it first (kill {pid})",
            pytrace=False,
        )
    if dev_operator_pod():
        pytest.fail(
            "make dev's operator pod still runs: stop it first (make dev-down)", pytrace=False
        )
    install_chart(cluster)
    path = service_account_kubeconfig(cluster, tmp_path_factory.mktemp("operator") / "kubeconfig")
    return OperatorInstall(kubeconfig=path)


@pytest.fixture(scope="session")
def operator(operator_install, tmp_path_factory):
    op = Operator(
        operator_install.kubeconfig,
        tmp_path_factory.mktemp("operator-log") / "operator.log",
    )
    op.start()
    yield op
    code = op.stop()
    # SIGTERM is a clean shutdown: kopf exits 0 (a signal exit would show as negative).
    assert code in (0, None), f"operator did not shut down cleanly (exit {code}):\n{op.log_tail()}"


@pytest.fixture
def running_operator(operator):
    """The session's operator, (re)started with every namespace in view and no extra flags
    if a test left it otherwise."""
    if not operator.running or operator.namespaces or operator.extra_args:
        operator.restart()
    return operator


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        op = item.funcargs.get("operator") or item.funcargs.get("running_operator")
        if isinstance(op, Operator):
            report.sections.append((f"operator log ({op.log_path})", op.log_tail(120)))


# ---------------------------------------------------------------------------
# Helpers the operator tests share.


def load_sample(name: str) -> dict:
    return yaml.safe_load((SAMPLES / name).read_text())


def tts(cluster, name: str, namespace: str) -> dict:
    return cluster.get("tts", name, "-n", namespace)


def condition(obj: dict, kind: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def ready_and_observed(cluster, name: str, namespace: str) -> dict | None:
    """The TTSService when Ready=True for its current generation, else None."""
    obj = tts(cluster, name, namespace)
    status = obj.get("status") or {}
    ready = condition(obj, "Ready")
    if (
        ready
        and ready.get("status") == "True"
        and status.get("observedGeneration") == obj["metadata"]["generation"]
    ):
        return obj
    return None


def wait_ready(cluster, name: str, namespace: str, timeout: float = 90) -> dict:
    def last():
        obj = tts(cluster, name, namespace)
        return {
            "generation": obj["metadata"]["generation"],
            "status": obj.get("status"),
        }

    try:
        return cluster.wait_for(
            lambda: ready_and_observed(cluster, name, namespace),
            timeout=timeout,
            what=f"TTSService {name} Ready",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nlast: {json.dumps(last(), indent=1)[:3000]}") from None


def children(cluster, kind: str, name: str, namespace: str) -> list[dict]:
    """Objects of `kind` labelled as this TTSService's children."""
    return cluster.get(kind, "-n", namespace, "-l", f"ttsfleet.io/service={name}")["items"]


def deployment_replicas(cluster, name: str, namespace: str) -> dict[str, int]:
    return {
        d["metadata"]["name"]: d["spec"]["replicas"]
        for d in children(cluster, "deployments", name, namespace)
    }


def pods_by_node(cluster, name: str, namespace: str) -> list[tuple[dict, dict | None]]:
    nodes = {n["metadata"]["name"]: n for n in cluster.get("nodes")["items"]}
    pods = children(cluster, "pods", name, namespace)
    return [
        (p, nodes.get(p["spec"].get("nodeName", "")))
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    ]


WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")
# What the operator writes. Deployments' and HPAs' status belong to controllers, the
# TTSService's /scale to the HPA: left out. Events are posted by the scheduler too: left out.
OPERATOR_WRITES = {
    ("ttsfleet.io", "ttsservices", ""),
    ("ttsfleet.io", "ttsservices", "status"),
    *((child.group, child.plural, "") for child in (*child_kinds.ALL, *child_kinds.CREATED_ONCE)),
}
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def write_requests(cluster) -> dict[tuple[str, str, str, str], float]:
    """The API server's own count of write requests on the kinds the operator writes,
    by (verb, group, resource, subresource), from `apiserver_request_total`."""
    return api_requests(cluster, WRITE_VERBS)


def api_requests(cluster, verbs: tuple[str, ...]) -> dict[tuple[str, str, str, str], float]:
    """`apiserver_request_total` of `verbs` (LIST, APPLY, ...) on the kinds the operator
    writes, by (verb, group, resource, subresource)."""
    counts: dict[tuple[str, str, str, str], float] = {}
    for line in cluster.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        key = (
            labels.get("group", ""),
            labels.get("resource", ""),
            labels.get("subresource", ""),
        )
        if (
            labels.get("verb") in verbs
            and key in OPERATOR_WRITES
            and labels.get("dry_run", "") == ""
        ):
            full = (labels["verb"], *key)
            counts[full] = counts.get(full, 0) + float(match["value"])
    return counts


def count_diff(before: dict, after: dict) -> dict:
    return {
        k: after.get(k, 0) - before.get(k, 0)
        for k in set(before) | set(after)
        if after.get(k, 0) != before.get(k, 0)
    }


def owned_by(obj: dict, owner: dict) -> bool:
    """A controller ownerReference to `owner` (the TTSService)."""
    return any(
        ref.get("uid") == owner["metadata"]["uid"]
        and ref.get("controller") is True
        and ref.get("kind") == KIND
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def resyncs(count: int) -> float:
    """Seconds that span `count` resync passes of the test operator."""
    return count * RESYNC_SECONDS + 1
