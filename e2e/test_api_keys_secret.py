"""Auth on by default, against a real API server: a TTSService that names no API keys Secret
gets one from the operator (running as the chart's ServiceAccount, so its RBAC is tested),
owned by the TTSService, mounted by every pod and unchanged by later passes (deleted with the
TTSService: test_operator.py's garbage collection test); `runtime.auth: Disabled` gets none."""

from __future__ import annotations

import base64
import json

import pytest

from support.operator_fixtures import children, load_sample, owned_by, tts, wait_ready

pytestmark = pytest.mark.timeout(180)


def secret(cluster, name: str, namespace: str) -> dict | None:
    proc = cluster.kubectl("get", "secret", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def test_a_service_without_keys_gets_an_owned_secret_that_outlives_passes(
    cluster, running_operator, namespace
):
    manifest = load_sample("base-0.6b.yaml")
    name = manifest["metadata"]["name"]
    cluster.apply(manifest, "-n", namespace)
    owner = wait_ready(cluster, name, namespace)

    keys = secret(cluster, f"{name}-api-keys", namespace)
    assert keys is not None and owned_by(keys, owner)
    (line,) = base64.b64decode(keys["data"]["keys"]).decode().splitlines()
    tenant, key = line.split()
    # A named tenant: a key added as `default: KEY` keeps the voices when this one goes.
    assert tenant == "default:" and key.startswith("ttsf_") and len(key) > 40

    (config,) = children(cluster, "configmaps", name, namespace)
    assert config["data"]["TTSFLEET_API_KEYS_FILE"] == "/etc/ttsfleet/api-keys/keys"
    assert "TTSFLEET_AUTH" not in config["data"]
    pods = children(cluster, "pods", name, namespace)
    assert pods
    for pod in pods:
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["api-keys"]["secret"]["secretName"] == f"{name}-api-keys"
        mounts = {m["name"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["api-keys"]["mountPath"] == "/etc/ttsfleet/api-keys"

    # A spec change makes a pass (Ready for the new generation proves it ran); the Secret,
    # key and all, is as it was.
    cluster.kubectl(
        "patch", "tts", name, "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":3}}'
    )
    assert tts(cluster, name, namespace)["metadata"]["generation"] > owner["metadata"]["generation"]
    wait_ready(cluster, name, namespace)
    after = secret(cluster, f"{name}-api-keys", namespace)
    assert after["metadata"]["resourceVersion"] == keys["metadata"]["resourceVersion"]
    assert after["data"] == keys["data"]


def test_auth_disabled_in_the_spec_gets_no_secret(cluster, running_operator, namespace):
    manifest = load_sample("base-0.6b.yaml")
    manifest["spec"]["runtime"]["auth"] = "Disabled"
    name = manifest["metadata"]["name"]
    cluster.apply(manifest, "-n", namespace)
    wait_ready(cluster, name, namespace)
    (config,) = children(cluster, "configmaps", name, namespace)
    assert config["data"]["TTSFLEET_AUTH"] == "disabled"
    assert secret(cluster, f"{name}-api-keys", namespace) is None
    for pod in children(cluster, "pods", name, namespace):
        assert "api-keys" not in {v["name"] for v in pod["spec"]["volumes"]}
