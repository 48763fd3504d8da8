"""`hack/cluster.sh down` leaves the host as `up` found it: no iptables chain, sysctl,
interface, address, route, mount, cgroup, file or process of the real node stays behind.

It brings the cluster down and up, so it runs on its own, never beside other e2e tests:
`pytest e2e -m host_teardown` (a plain `pytest e2e` deselects it; e2e/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.host_teardown, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "hack" / "cluster.sh"

# Kernel settings a node could touch (kubelet, CNI, kube-proxy), read wholesale so that a
# change nobody listed is caught too. Counters and clocks that move by themselves are not
# settings and are left out.
SYSCTL_TREES = (
    "kernel",
    "vm",
    "net/ipv4",
    "net/ipv6/conf/all",
    "net/ipv6/conf/default",
    "net/bridge",
    "net/netfilter",
    "net/core",
)
VOLATILE_SYSCTL = re.compile(
    r"kernel/random/|kernel/ns_last_pid|kernel/pty/nr|kernel/tainted|kernel/sched_domain/"
    r"|net/netfilter/nf_conntrack_count|vm/stat_refresh|net/ipv4/conf/(?!all/|default/)"
    r"|net/ipv4/neigh/|kernel/perf_event_max"
)
# Paths outside the cache that kubelet, containerd and CNI create when nobody tells them not to.
HOST_PATHS = (
    "/var/lib/cni",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/run/containerd",
    "/var/run/netns",
    "/etc/cni",
    "/opt/cni",
    "/opt/containerd",
    "/run/ttsfleet-realnode",
)
NODE_PROGRAMS = re.compile(r"(^|/)(containerd|containerd-shim[-\w]*|kubelet|kube-proxy|runc)$")


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _sysctls() -> list[str]:
    values = []
    for tree in SYSCTL_TREES:
        for path in sorted(Path("/proc/sys", tree).rglob("*")):
            key = str(path.relative_to("/proc/sys"))
            if VOLATILE_SYSCTL.search(key) or not path.is_file():
                continue
            try:
                values.append(f"{key}={path.read_text().strip()}")
            except OSError:
                continue  # write-only or refused
    return values


def _iptables(binary: str) -> list[str]:
    rules = []
    for line in _run(f"{binary}-save").splitlines():
        if line.startswith((":", "-A", "*")):
            # Chain counters ([packets:bytes]) move with any traffic.
            rules.append(re.sub(r" \[\d+:\d+\]$", "", line))
    return rules


def _cgroups() -> list[str]:
    dirs = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if hierarchy.is_dir():
            dirs += [str(p) for p in hierarchy.iterdir() if p.is_dir()]
    return sorted(dirs)


def _processes() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and NODE_PROGRAMS.search(argv[0].decode(errors="replace")):
            found.append(" ".join(a.decode(errors="replace") for a in argv).strip())
    return sorted(found)


def host_state() -> dict[str, list[str]]:
    """What a node may change on the host, each part as a sorted list of lines."""
    return {
        "iptables": _iptables("iptables"),
        "ip6tables": _iptables("ip6tables"),
        "sysctls": _sysctls(),
        "links": sorted(
            re.sub(r"^\d+: ", "", line).split(" qdisc")[0]
            for line in _run("ip", "-o", "link").splitlines()
        ),
        "addresses": sorted(
            re.sub(r"\\\s+valid_lft.*", "", line) for line in _run("ip", "-o", "addr").splitlines()
        ),
        "routes": sorted(
            _run("ip", "-4", "route", "show", "table", "all").splitlines()
            + _run("ip", "-6", "route", "show", "table", "all").splitlines()
        ),
        "mounts": sorted(
            line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
        ),
        "cgroups": _cgroups(),
        "paths": [p for p in HOST_PATHS if os.path.lexists(p)],
        "processes": _processes(),
    }


def _cluster_sh(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"hack/cluster.sh {' '.join(args)} failed:\n{proc.stderr}"
    return proc


def _kubectl(*args: str, input: str | None = None) -> str:
    kubeconfig = _cluster_sh("kubeconfig").stdout.strip()
    bin_dir = _run(str(ROOT / "hack" / "build-control-plane.sh"), "--print-bin-dir").strip()
    return subprocess.run(
        [f"{bin_dir}/kubectl", "--kubeconfig", kubeconfig, *args],
        input=input,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def _give_the_node_work() -> None:
    """What a node's teardown has to undo: a pod with volumes (mounts), a host port on the
    node address (CNI portmap chains) and a Service (kube-proxy chains)."""
    facts = dict(
        re.fullmatch(r"(REALNODE_[A-Z_]+)=(\S+)", line).groups()
        for line in (ROOT / "hack" / "realnode" / "node.sh").read_text().splitlines()
        if re.fullmatch(r"REALNODE_[A-Z_]+=[^$\s]+", line)
    )
    key, pause = facts["REALNODE_KEY"], None
    images = _kubectl("get", "node", facts["REALNODE_NAME"], "-o", "json")
    # The sandbox image is on the node already: use it as the container too.
    pause = next(
        name
        for image in json.loads(images)["status"]["images"]
        for name in image["names"]
        if "pause" in name
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "teardown-probe", "namespace": "default", "labels": {"app": "probe"}},
        "spec": {
            "nodeSelector": {key: "true"},
            "tolerations": [{"key": key, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "pause",
                    "image": pause,
                    "imagePullPolicy": "Never",
                    "ports": [
                        {"containerPort": 8080, "hostPort": 18080, "hostIP": facts["REALNODE_IP"]}
                    ],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "teardown-probe", "namespace": "default"},
        "spec": {"selector": {"app": "probe"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    _kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod, service]}),
    )
    _kubectl(
        "wait", "--for=condition=Ready", "pod/teardown-probe", "-n", "default", "--timeout=90s"
    )


def _diff(before: dict, after: dict) -> dict:
    return {
        part: {
            "left behind": sorted(set(after[part]) - set(before[part])),
            "gone": sorted(set(before[part]) - set(after[part])),
        }
        for part in before
        if before[part] != after[part]
    }


def test_down_restores_the_host_as_up_found_it():
    was_up = subprocess.run([str(CLUSTER_SH), "status"], capture_output=True).returncode == 0
    if was_up:
        _cluster_sh("down")
    try:
        before = host_state()
        started = time.monotonic()
        _cluster_sh("up")
        up_s = time.monotonic() - started
        assert host_state() != before, "up changed nothing on the host: is the real node off?"
        _give_the_node_work()
        started = time.monotonic()
        _cluster_sh("down")
        down_s = time.monotonic() - started
        after = host_state()
        assert _diff(before, after) == {}
        print(f"up {up_s:.0f}s, down {down_s:.0f}s")
    finally:
        if was_up:
            _cluster_sh("up")
