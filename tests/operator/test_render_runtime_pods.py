"""What every runtime pod gets: GPUs, probes, drain time, the restricted profile."""

import json

from ttsfleet_operator.render import render_fleet


def by_kind(manifests, kind):
    return [m for m in manifests if m["kind"] == kind]


def pod_of(service, pool="on-demand"):
    deployment = next(m for m in render_fleet(service) if m["metadata"]["name"] == f"{service.name}-{pool}")
    return deployment["spec"]["template"]["spec"]


def container_of(service, pool="on-demand"):
    return pod_of(service, pool)["containers"][0]


def test_gpu_limit_and_request_follow_the_spec(make_service):
    resources = container_of(make_service(gpu={"class": "h200", "count": 2}))["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "2"
    assert resources["requests"]["nvidia.com/gpu"] == "2"


def test_gpu_pods_tolerate_the_gpu_taint(make_service):
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_of(make_service())[
        "tolerations"
    ]


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


def test_the_server_runs_the_hub_model_with_the_engine_config(make_service):
    container = container_of(make_service(model={"size": "0.6B", "variant": "Base", "revision": "abc123"}))
    assert container["command"] == ["ttsfleet"]
    args = container["args"]
    assert args[:3] == ["serve", "--model", "Qwen/Qwen3-TTS-12Hz-0.6B-Base"]
    assert args[args.index("--revision") + 1] == "abc123"
    assert args[args.index("--port") + 1] == "8000"
    assert args[args.index("--engine-config") + 1] == "/etc/ttsfleet/engine.json"


def test_a_pvc_checkpoint_is_mounted_read_only_and_the_hub_is_not_used(make_service):
    service = make_service(
        model={"size": "1.7B", "variant": "Base", "source": {"pvc": {"claimName": "models", "path": "/qwen/base"}}}
    )
    container, pod = container_of(service), pod_of(service)
    assert container["args"][2] == "/models/qwen/base"
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in pod["volumes"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]


def test_engine_settings_reach_the_configmap_and_a_change_rolls_the_pods(make_service):
    first = render_fleet(make_service(engine={"maxBatch": 32}))
    second = render_fleet(make_service(engine={"maxBatch": 64}))
    config = json.loads(by_kind(first, "ConfigMap")[0]["data"]["engine.json"])
    assert config["engine"]["maxBatch"] == 32 and config["model"]["variant"] == "CustomVoice"

    def config_hash(manifests):
        return by_kind(manifests, "Deployment")[0]["spec"]["template"]["metadata"]["annotations"][
            "ttsfleet.io/engine-config-hash"
        ]

    assert config_hash(first) != config_hash(second)


def test_rollouts_never_drop_serving_capacity(make_service):
    deployment = by_kind(render_fleet(make_service()), "Deployment")[0]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
