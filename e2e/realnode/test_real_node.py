"""The real node of the local cluster (hack/realnode/node.sh): a kubelet with containerd,
runc, a CNI bridge and kube-proxy next to kwok's fake nodes. Pods meant for it run there for
real (image, logs, exec), Services reach them through kube-proxy, and nothing else lands
there or takes it over."""

from __future__ import annotations

import base64
import ipaddress
import json
import socket
import ssl
import urllib.request

import pytest

pytestmark = pytest.mark.slow


def _pod(real_node, name: str, image: str, command: list[str], labels: dict | None = None):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": real_node.pod_spec(
            terminationGracePeriodSeconds=1,
            containers=[
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                }
            ],
        ),
    }


# A web server that answers with the pod's own name, so a client can tell replicas apart.
WHOAMI = [
    "sh",
    "-c",
    "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www",
]


def _ready_pods(cluster, namespace: str, selector: str, count: int) -> list[dict]:
    def ready():
        pods = cluster.get("pods", "-n", namespace, "-l", selector)["items"]
        ok = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions", [])
            )
        ]
        return ok if len(ok) == count else None

    return cluster.wait_for(ready, timeout=90, what=f"{count} Ready pods {selector}")


def test_the_real_node_is_ready_and_reports_its_kubelet_and_runtime(cluster, real_node, versions):
    node = cluster.get("node", real_node.name)
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == versions["KUBE_VERSION"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.ip


def test_only_pods_meant_for_the_real_node_land_there(cluster, namespace, real_node):
    node = cluster.get("node", real_node.name)
    assert node["metadata"]["labels"][real_node.key] == "true"
    taints = [{k: t.get(k) for k in ("key", "value", "effect")} for t in node["spec"]["taints"]]
    assert {"key": real_node.key, "value": "true", "effect": "NoSchedule"} in taints

    # Selecting the node is not enough: without the toleration the scheduler refuses it.
    pod = _pod(real_node, "untolerated", "localhost/none:never", ["true"])
    del pod["spec"]["tolerations"]
    cluster.apply(pod, "-n", namespace)

    def unschedulable():
        conditions = cluster.get("pod", "untolerated", "-n", namespace)["status"].get(
            "conditions", []
        )
        return [
            c["message"]
            for c in conditions
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
        ]

    # The only node with the label is refused for its taint (the scheduler counts it among
    # the tainted ones; the one untainted fake node lacks the label).
    (message,) = cluster.wait_for(unschedulable, timeout=30, what="the scheduler's refusal")
    assert "untolerated taint" in message
    assert not cluster.get("pod", "untolerated", "-n", namespace)["spec"].get("nodeName")


def test_kwok_does_not_manage_the_real_node(cluster, real_node):
    node = cluster.get("node", real_node.name)
    # kwok manages the nodes with this annotation (e2e/cluster/nodes.yaml). A node it took
    # over would get kwok's heartbeat: its lease held by the kwok controller, not by the
    # node's kubelet, and a "kwok-..." kubelet version in its status.
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    lease = cluster.get("lease", real_node.name, "-n", "kube-node-lease")
    assert lease["spec"]["holderIdentity"] == real_node.name
    assert not node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok")


def test_a_pod_runs_from_a_local_image_and_serves_logs_and_exec(
    cluster, namespace, real_node, toolbox_image
):
    cluster.apply(
        _pod(
            real_node,
            "hello",
            toolbox_image.name,
            ["sh", "-c", "echo hello from $(hostname); sleep 3600"],
        ),
        "-n",
        namespace,
    )
    (pod,) = _ready_pods(cluster, namespace, "app=hello", 1)
    assert pod["spec"]["nodeName"] == real_node.name
    # An address from the node's CNI bridge, not one kwok makes up for a fake pod.
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(real_node.pod_cidr)

    logs = cluster.wait_for(
        lambda: cluster.kubectl("logs", "-n", namespace, "hello").stdout,
        timeout=30,
        what="the pod's log",
    )
    assert logs.strip() == "hello from hello"
    # exec runs inside the container: its own process tree (pid 1 is the container's
    # command, which the shell replaced by its last one), its own file system.
    ps = cluster.kubectl("exec", "-n", namespace, "hello", "--", "cat", "/proc/1/cmdline").stdout
    assert ps.split("\0")[:2] == ["sleep", "3600"]
    written = cluster.kubectl(
        "exec",
        "-n",
        namespace,
        "hello",
        "--",
        "sh",
        "-c",
        "echo $((6 * 7)) > /answer && cat /answer",
    ).stdout
    assert written.strip() == "42"


def test_a_cluster_ip_service_balances_over_two_pods_from_the_host_and_from_a_pod(
    cluster, namespace, real_node, toolbox_image
):
    for name in ("whoami-a", "whoami-b"):
        cluster.apply(
            _pod(real_node, name, toolbox_image.name, WHOAMI, labels={"app": "whoami"}),
            "-n",
            namespace,
        )
    cluster.apply(_pod(real_node, "client", toolbox_image.name, ["sleep", "3600"]), "-n", namespace)
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "whoami"},
            "spec": {"selector": {"app": "whoami"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        "-n",
        namespace,
    )
    _ready_pods(cluster, namespace, "app=whoami", 2)
    _ready_pods(cluster, namespace, "app=client", 1)
    ip = cluster.get("service", "whoami", "-n", namespace)["spec"]["clusterIP"]

    def answers_from_host(n: int) -> set[str]:
        seen = set()
        for _ in range(n):
            try:
                with urllib.request.urlopen(f"http://{ip}/", timeout=2) as r:
                    seen.add(r.read().decode().strip())
            except OSError:
                return set()  # kube-proxy has not programmed the Service yet
        return seen

    # kube-proxy picks an endpoint at random per connection: 40 tries miss one of two
    # replicas with probability 2 * 2**-40.
    seen = cluster.wait_for(
        lambda: answers_from_host(40) or None, timeout=60, what=f"{ip} to answer from the host"
    )
    assert seen == {"whoami-a", "whoami-b"}

    from_pod = cluster.kubectl(
        "exec",
        "-n",
        namespace,
        "client",
        "--",
        "sh",
        "-c",
        # (no wget -T: Debian's busybox-static 1.35 wget crashes with a timeout set)
        f"for i in $(seq 40); do wget -q -O - http://{ip}/; done",
    ).stdout.split()
    assert len(from_pod) == 40
    assert set(from_pod) == {"whoami-a", "whoami-b"}


def test_the_service_environment_reaches_pods_as_a_kubelet_sets_it(
    cluster, namespace, real_node, toolbox_image
):
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "probe"},
            "spec": {"selector": {"app": "nobody"}, "ports": [{"port": 81}]},
        },
        "-n",
        namespace,
    )
    cluster.apply(_pod(real_node, "env", toolbox_image.name, ["sleep", "3600"]), "-n", namespace)
    _ready_pods(cluster, namespace, "app=env", 1)
    ip = cluster.get("service", "probe", "-n", namespace)["spec"]["clusterIP"]
    env = cluster.kubectl("exec", "-n", namespace, "env", "--", "env").stdout.splitlines()
    # No cluster DNS runs here: the kubelet's Service variables are how pods find a Service.
    assert f"PROBE_SERVICE_HOST={ip}" in env
    assert "PROBE_SERVICE_PORT=81" in env
    # Nor may a pod's lookups reach the host's resolvers: only the pod's own loopback.
    resolv = cluster.kubectl("exec", "-n", namespace, "env", "--", "cat", "/etc/resolv.conf")
    servers = [
        line.split()[1] for line in resolv.stdout.splitlines() if line.startswith("nameserver")
    ]
    assert all(ipaddress.ip_address(s).is_loopback for s in servers), json.dumps(resolv.stdout)


def test_load_image_leaves_an_image_the_node_holds_alone(toolbox_image):
    assert "already there" in toolbox_image.load()


def test_pods_reach_the_api_server_as_in_cluster_clients_do(
    cluster, namespace, real_node, toolbox_image
):
    cluster.apply(_pod(real_node, "client", toolbox_image.name, ["sleep", "3600"]), "-n", namespace)
    _ready_pods(cluster, namespace, "app=client", 1)
    # The kubernetes Service, by the variables every pod gets: the connection reaches the
    # API server, whose certificate verifies against the pod's CA for the Service's address.
    verify = cluster.kubectl(
        "exec",
        "-n",
        namespace,
        "client",
        "--",
        "sh",
        "-c",
        "openssl s_client -connect $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
        " -verify_ip $KUBERNETES_SERVICE_HOST -verify_return_error"
        " -CAfile /var/run/secrets/kubernetes.io/serviceaccount/ca.crt </dev/null",
    )
    assert "Verify return code: 0 (ok)" in verify.stdout


def test_the_api_server_certificate_names_the_address_in_cluster_clients_use(cluster, real_node):
    # What a verifying client (the operator's, in a pod) checks: the serving certificate,
    # signed by the cluster CA, names the kubernetes Service's ClusterIP.
    server = cluster.kubectl(
        "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster}"
    ).stdout
    port = int(json.loads(server)["server"].rsplit(":", 1)[1])
    ca = base64.b64decode(json.loads(server)["certificate-authority-data"]).decode()
    service_ip = cluster.get("service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    context = ssl.create_default_context(cadata=ca)
    # Through the forwarder on the node address, where the Service's endpoint points.
    with (
        socket.create_connection((real_node.ip, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=service_ip) as tls,
    ):
        assert tls.version()
