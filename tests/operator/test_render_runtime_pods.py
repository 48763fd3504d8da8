"""What every runtime pod gets: GPUs, probes, drain time, the restricted profile."""

import pathlib
import re

import pytest

from ttsfleet_operator.cli import main
from ttsfleet_operator.render import api_keys, render_fleet
from ttsfleet_operator.render.pod_security import RUNTIME_UID


def by_kind(manifests, kind):
    return [m for m in manifests if m["kind"] == kind]


def pod_of(service, pool="on-demand"):
    deployment = next(
        m for m in render_fleet(service) if m["metadata"]["name"] == f"{service.name}-{pool}"
    )
    return deployment["spec"]["template"]["spec"]


def container_of(service, pool="on-demand"):
    return pod_of(service, pool)["containers"][0]


def test_gpu_limit_and_request_follow_the_spec(make_service):
    # One GPU a pod: the runtime serves with one, and the CRD refuses more (gpu.count).
    resources = container_of(make_service(gpu={"class": "h200", "count": 1}))["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "1"
    assert resources["requests"]["nvidia.com/gpu"] == "1"


def test_gpu_pods_tolerate_the_gpu_taint(make_service):
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_of(
        make_service()
    )["tolerations"]


def test_startup_probe_waits_for_the_model_load(make_service):
    probe = container_of(make_service(runtime={"startupTimeoutSeconds": 1200}))["startupProbe"]
    assert probe["httpGet"]["path"] == "/health/ready"
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 1200


def test_readiness_and_liveness_use_the_server_health_routes(make_service):
    container = container_of(make_service())
    assert container["readinessProbe"]["httpGet"] == {"port": "http", "path": "/health/ready"}
    assert container["livenessProbe"]["httpGet"] == {"port": "http", "path": "/health/live"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_streams_get_time_to_drain_before_the_pod_is_killed(make_service):
    service = make_service(runtime={"terminationGraceSeconds": 300})
    pod, container = pod_of(service), container_of(service)
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= 300 + pre_stop


def test_restricted_security_context(make_service):
    pod, container = pod_of(make_service()), container_of(make_service())
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False


def test_writable_paths_are_empty_dirs_because_the_root_is_read_only(make_service):
    container = container_of(make_service())
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_of(make_service())["volumes"]}
    for path in ("/tmp", "/var/cache/ttsfleet"):
        assert "emptyDir" in volumes[mounts[path]]
    assert volumes[mounts["/var/cache/ttsfleet"]]["emptyDir"]["sizeLimit"] == "40Gi"


def test_pods_spread_over_zones(make_service):
    keys = [c["topologyKey"] for c in pod_of(make_service())["topologySpreadConstraints"]]
    assert "topology.kubernetes.io/zone" in keys


def engine_environment(service):
    (configmap,) = [m for m in render_fleet(service) if m["kind"] == "ConfigMap"]
    return configmap["data"]


def test_the_server_takes_every_setting_from_the_engine_configmap(make_service):
    service = make_service(model={"size": "0.6B", "variant": "Base", "revision": "abc123"})
    container = container_of(service)
    assert container["command"] == ["ttsfleet"] and container["args"] == ["serve"]
    assert container["envFrom"] == [{"configMapRef": {"name": "demo-engine"}}]
    environment = engine_environment(service)
    assert environment["TTSFLEET_MODEL"] == "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
    assert environment["TTSFLEET_MODEL_REVISION"] == "abc123"
    assert environment["TTSFLEET_PORT"] == "8000" and environment["TTSFLEET_DEVICE"] == "cuda"
    assert all(isinstance(value, str) for value in environment.values())


def test_engine_settings_map_onto_the_servers_variables(make_service):
    service = make_service(
        engine={
            "maxBatch": 32,
            "maxQueue": 100,
            "cudaGraphs": False,
            "dtype": "float16",
            "weights": "fp8",
            "firstChunkFrames": 1,
        },
        runtime={"terminationGraceSeconds": 90},
    )
    environment = engine_environment(service)
    assert environment["TTSFLEET_WEIGHTS"] == "fp8"
    assert environment["TTSFLEET_MAX_BATCH"] == "32" and environment["TTSFLEET_MAX_QUEUE"] == "100"
    assert (
        environment["TTSFLEET_CUDA_GRAPHS"] == "off" and environment["TTSFLEET_DTYPE"] == "float16"
    )
    assert environment["TTSFLEET_FIRST_CHUNK_FRAMES"] == "1"
    assert environment["TTSFLEET_DRAIN_TIMEOUT"] == "90"


def test_the_runtime_cli_knows_the_variables_it_is_given(make_service, capsys):
    # Each TTSFLEET_* the operator sets must be one `ttsfleet serve` reads.
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    serve_help = capsys.readouterr().out
    service = make_service(model={"size": "1.7B", "variant": "Base", "revision": "r1"})
    for variable in engine_environment(service):
        assert f"[{variable}]" in serve_help, variable


def api_keys_volume(service):
    volumes = [v for v in pod_of(service)["volumes"] if v["name"] == "api-keys"]
    mounts = [m for m in container_of(service)["volumeMounts"] if m["name"] == "api-keys"]
    if not volumes:
        assert not mounts
        return None
    assert mounts == [{"name": "api-keys", "mountPath": "/etc/ttsfleet/api-keys", "readOnly": True}]
    return volumes[0]["secret"]


def test_auth_is_on_by_default_with_the_operators_generated_secret(make_service):
    service = make_service()
    environment = engine_environment(service)
    assert "TTSFLEET_AUTH" not in environment
    assert environment["TTSFLEET_API_KEYS_FILE"] == "/etc/ttsfleet/api-keys/keys"
    assert api_keys_volume(service) == {
        "secretName": "demo-api-keys",
        "items": [{"key": "keys", "path": "keys"}],
    }
    assert api_keys.generated_secret_name(service) == "demo-api-keys"


def test_a_spec_secret_replaces_the_generated_one(make_service):
    service = make_service(runtime={"apiKeysSecret": "tts-keys"})
    assert engine_environment(service)["TTSFLEET_API_KEYS_FILE"] == "/etc/ttsfleet/api-keys/keys"
    assert api_keys_volume(service)["secretName"] == "tts-keys"
    assert api_keys.generated_secret_name(service) is None


def test_auth_is_off_only_when_the_spec_says_so(make_service):
    service = make_service(runtime={"auth": "Disabled"})
    environment = engine_environment(service)
    assert (
        environment["TTSFLEET_AUTH"] == "disabled" and "TTSFLEET_API_KEYS_FILE" not in environment
    )
    assert api_keys_volume(service) is None
    assert api_keys.generated_secret_name(service) is None


def test_the_generated_secret_holds_one_random_key_the_runtime_accepts(make_service, tmp_path):
    from ttsfleet_runtime.server.auth import ApiKeys

    service = make_service()
    keys = {api_keys.new_api_key() for _ in range(100)}
    assert len(keys) == 100
    key = keys.pop()
    assert re.fullmatch(r"ttsf_[A-Za-z0-9_-]{43}", key)
    secret = api_keys.render_api_keys_secret(service, key)
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "demo-api-keys"
    assert secret["metadata"]["labels"]["ttsfleet.io/service"] == "demo"
    assert secret["stringData"] == {"keys": f"default: {key}\n"}
    # The file the pods mount, read by the runtime's own auth.
    keys_file = tmp_path / "keys"
    keys_file.write_text(secret["stringData"]["keys"])
    accepted = ApiKeys(keys_file=keys_file)
    assert accepted.count == 1
    tenant = accepted.authenticate(f"Bearer {key}")
    # A named tenant, not one derived from the key: a key added under the same name and the
    # first removed (a rotation) is the same tenant, which keeps its uploaded voices.
    rotated = api_keys.new_api_key()
    keys_file.write_text(f"default: {rotated}\n")
    assert ApiKeys(keys_file=keys_file).authenticate(f"Bearer {rotated}") == tenant == "default"


def test_a_pvc_checkpoint_is_mounted_read_only_and_the_hub_is_not_used(make_service):
    service = make_service(
        model={
            "size": "1.7B",
            "variant": "Base",
            "source": {"pvc": {"claimName": "models", "path": "/qwen/base"}},
        }
    )
    container, pod = container_of(service), pod_of(service)
    assert engine_environment(service)["TTSFLEET_MODEL"] == "/models/qwen/base"
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {
        "name": "model",
        "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
    } in pod["volumes"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]


def test_an_engine_change_rolls_the_pods(make_service):
    first = render_fleet(make_service(engine={"maxBatch": 32}))
    second = render_fleet(make_service(engine={"maxBatch": 64}))

    def config_hash(manifests):
        return by_kind(manifests, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"][
            "ttsfleet.io/engine-config-hash"
        ]

    assert config_hash(first) != config_hash(second)


def test_rollouts_never_drop_serving_capacity(make_service):
    deployment = by_kind(render_fleet(make_service()), "Deployment")[0]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pods_run_as_the_runtime_images_user():
    dockerfile = (pathlib.Path(__file__).resolve().parents[2] / "Dockerfile.runtime").read_text()
    (user,) = re.findall(r"^USER (\d+)", dockerfile, flags=re.MULTILINE)
    assert str(RUNTIME_UID) == user
