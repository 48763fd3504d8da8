"""Fixtures for tests against a real control plane.

The `cluster` fixture runs `hack/cluster.sh up` once per session. The provider comes
from TTSFLEET_CLUSTER_PROVIDER (kwok | kind | existing); unset, hack/cluster.sh picks
kind where `docker info` works and kwok otherwise (so kwok here). A cluster
this session started is deleted at the end unless TTSFLEET_E2E_KEEP_CLUSTER=1; a cluster
that was already running is left as it was (fast local iteration: `hack/cluster.sh up`
once, then run pytest as often as you like).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The operator fixtures (chart installed by helm, the operator as its ServiceAccount) and a
# hook, registered by import: tests/support/operator_fixtures.py.
from support.operator_fixtures import (  # noqa: F401
    operator,
    operator_install,
    pytest_runtest_makereport,
    running_operator,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SH = REPO_ROOT / "hack" / "cluster.sh"
BUILD_SH = REPO_ROOT / "hack" / "build-control-plane.sh"
REAL_NODE_SH = REPO_ROOT / "hack" / "realnode" / "node.sh"
OCI_IMAGE_PY = REPO_ROOT / "hack" / "realnode" / "oci-image.py"


HOST_TEARDOWN = "host_teardown"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{HOST_TEARDOWN}: brings the whole cluster down and up; runs only when selected "
        f"(pytest e2e -m {HOST_TEARDOWN}), never beside other e2e tests",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that tear the cluster down run only in a session of their own: other tests'
    session fixtures (the operator, the chart) would lose their cluster under them."""
    if HOST_TEARDOWN in (config.option.markexpr or ""):
        return
    kept = [i for i in items if i.get_closest_marker(HOST_TEARDOWN) is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


def pinned_versions() -> dict[str, str]:
    """KEY=value pairs of hack/versions.env, the one place versions are pinned."""
    versions = {}
    for line in (REPO_ROOT / "hack" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


@dataclass
class Cluster:
    name: str
    provider: str
    kubeconfig: Path
    kubectl_path: str

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; raises with stderr on failure when check."""
        proc = subprocess.run(
            [self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}"
            )
        return proc

    def get(self, *args: str) -> Any:
        """`kubectl get ... -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(
        self, manifest: dict | list[dict] | str, *args: str
    ) -> subprocess.CompletedProcess[str]:
        if isinstance(manifest, dict):
            text = json.dumps(manifest)
        elif isinstance(manifest, list):
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": manifest})
        else:
            text = manifest
        return self.kubectl("apply", "-f", "-", *args, input=text)

    wait_for = staticmethod(lambda *a, **kw: wait_for(*a, **kw))

    def api_client(self):
        """A `kubernetes` ApiClient for this cluster (imported lazily)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 60,
    interval: float = 0.5,
    what: str = "condition",
) -> Any:
    """Poll until condition() returns something truthy; return it. Fails with `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def _run_cluster_sh(*args: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [str(CLUSTER_SH), *args], env=env, capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        raise RuntimeError(f"hack/cluster.sh {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    env = dict(os.environ)
    # kubectl's discovery cache under our cache dir, not ~/.kube (for our kubectl calls too).
    env["KUBECACHEDIR"] = env.get("KUBECACHEDIR") or str(
        Path(env.get("TTSFLEET_CACHE") or Path.home() / ".cache" / "ttsfleet") / "kube-cache"
    )
    os.environ.setdefault("KUBECACHEDIR", env["KUBECACHEDIR"])
    name = env.setdefault("TTSFLEET_CLUSTER_NAME", "ttsfleet")
    status = subprocess.run(
        [str(CLUSTER_SH), "status"], env=env, capture_output=True, text=True, timeout=60
    )
    was_running = status.returncode == 0
    try:
        _run_cluster_sh("up", env=env)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    kubeconfig = Path(_run_cluster_sh("kubeconfig", env=env))
    # The provider `up` settled on (kwok | kind | existing), recorded next to the kubeconfig.
    provider = (kubeconfig.parent / "provider").read_text().strip()
    bin_dir = Path(
        subprocess.run(
            [str(BUILD_SH), "--print-bin-dir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    kubectl = (
        str(bin_dir / "kubectl") if (bin_dir / "kubectl").exists() else shutil.which("kubectl")
    )
    assert kubectl, "no kubectl: run hack/build-control-plane.sh"
    yield Cluster(name=name, provider=provider, kubeconfig=kubeconfig, kubectl_path=kubectl)
    if not was_running and env.get("TTSFLEET_E2E_KEEP_CLUSTER") != "1":
        _run_cluster_sh("down", env=env)


@dataclass(frozen=True)
class RealNode:
    """The node with a kubelet (hack/realnode/node.sh), as pods meant for it must ask."""

    name: str
    key: str  # label key (value "true") and NoSchedule taint key (value "true")
    ip: str  # the node address, on the bridge the scripts create; pods reach the host here
    pod_cidr: str

    def pod_spec(self, **spec: Any) -> dict:
        """A pod spec that lands on this node and nowhere else."""
        return {
            "nodeSelector": {self.key: "true"},
            "tolerations": [
                {"key": self.key, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
            ],
            **spec,
        }


def real_node_facts() -> dict[str, str]:
    """REALNODE_* assignments of hack/realnode/node.sh, where the node's names are set."""
    facts = {}
    for line in REAL_NODE_SH.read_text().splitlines():
        m = re.fullmatch(r"(REALNODE_[A-Z_]+)=([^$\s]+)", line.strip())
        if m:
            facts[m.group(1)] = m.group(2)
    return facts


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> RealNode:
    """The real node `hack/cluster.sh up` starts next to the fake ones (kwok provider)."""
    if cluster.provider != "kwok":
        pytest.skip(
            f"the real node is part of the kwok provider (this cluster: {cluster.provider})"
        )
    if os.environ.get("TTSFLEET_REAL_NODE") == "0":
        pytest.skip("TTSFLEET_REAL_NODE=0: the cluster has no real node")
    facts = real_node_facts()
    return RealNode(
        name=facts["REALNODE_NAME"],
        key=facts["REALNODE_KEY"],
        ip=facts["REALNODE_IP"],
        pod_cidr=facts["REALNODE_POD_CIDR"],
    )


@dataclass(frozen=True)
class LocalImage:
    """An image built here, as an OCI archive, and loaded into the real node's containerd."""

    name: str
    archive: Path

    def load(self) -> str:
        """`hack/cluster.sh load-image`; returns what it reported."""
        proc = subprocess.run(
            [str(CLUSTER_SH), "load-image", str(self.archive)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"hack/cluster.sh load-image failed:\n{proc.stderr}{proc.stdout}")
        return proc.stderr


def _shared_libraries(binary: str) -> list[str]:
    """The files the dynamic loader maps for `binary` (ldd), loader included."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"(/\S+\.so[.\d]*)", out)))


@pytest.fixture(scope="session")
def toolbox_image(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> LocalImage:
    """A one-layer image of this host's files: Debian's busybox-static (a shell, httpd,
    wget) and openssl with its libraries (a TLS client that verifies, as busybox's cannot).
    Built here and loaded into the real node: pods use it with imagePullPolicy Never."""
    busybox = "/usr/bin/busybox"
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    version = subprocess.run([busybox], capture_output=True, text=True).stdout.split()[1]
    image = LocalImage(
        name=f"localhost/ttsfleet-e2e/toolbox:busybox-{version.lstrip('v')}",
        archive=tmp_path_factory.mktemp("images") / "toolbox.tar",
    )
    files = [f"{busybox}:/bin/busybox", "/usr/bin/openssl:/usr/bin/openssl"]
    files += [f"{lib}:{lib}" for lib in _shared_libraries("/usr/bin/openssl")]
    subprocess.run(
        [
            "python3",
            str(OCI_IMAGE_PY),
            "--name",
            image.name,
            "--out",
            str(image.archive),
            *(a for f in files for a in ("--file", f)),
            *(
                a
                for applet in applets
                if applet != "busybox"  # the binary itself, not a link to it
                for a in ("--link", f"/bin/{applet}:busybox")
            ),
            "--cmd",
            "sh",
        ],
        check=True,
        capture_output=True,
    )
    image.load()
    return image


@pytest.fixture(scope="session")
def versions() -> dict[str, str]:
    """The pinned versions (hack/versions.env), KUBE_VERSION being the release this run's
    cluster runs: TTSFLEET_KUBE_RELEASE=oldest picks KUBE_OLDEST_VERSION (hack/kube-release.sh)."""
    pinned = pinned_versions()
    if os.environ.get("TTSFLEET_KUBE_RELEASE", "newest") == "oldest":
        pinned["KUBE_VERSION"] = pinned["KUBE_OLDEST_VERSION"]
    return pinned


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    # Parametrized names carry brackets: keep only what a namespace name may hold.
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().replace("_", "-"))[:40].strip("-")
    name = f"e2e-{base}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    # Pods are refused until the namespace's default ServiceAccount exists.
    wait_for(
        lambda: (
            cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            == 0
        ),
        timeout=30,
        what=f"ServiceAccount default in {name}",
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def gateway_api(cluster):
    """The Gateway API CRDs (hack/gateway-api.sh), for the canary tests that route by HTTPRoute."""
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "KUBECTL": cluster.kubectl_path,
    }
    proc = subprocess.run(
        [str(REPO_ROOT / "hack" / "gateway-api.sh"), "install"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"hack/gateway-api.sh install failed:\n{proc.stderr}{proc.stdout}"
    # Left installed: later tests see a cluster that serves Gateway API, as many do.
