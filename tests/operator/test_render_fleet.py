"""Which objects a TTSService becomes, their labels, and how replicas are split."""

from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.render.hpa import gpu_utilization_target
from ttsfleet_runtime import metrics


def kinds_and_names(manifests):
    return [(m["kind"], m["metadata"]["name"]) for m in manifests]


def deployment_replicas(manifests):
    return {
        m["metadata"]["name"]: m["spec"]["replicas"] for m in manifests if m["kind"] == "Deployment"
    }


def test_a_plain_service_gets_config_deployment_service_and_pdb(make_service):
    assert kinds_and_names(render_fleet(make_service())) == [
        ("ConfigMap", "demo-engine"),
        ("Deployment", "demo-on-demand"),
        ("Service", "demo"),
        ("PodDisruptionBudget", "demo"),
    ]


def test_spot_ratio_adds_a_spot_deployment_with_the_split(make_service):
    manifests = render_fleet(make_service(replicas=6, spot={"ratio": 0.67, "minOnDemand": 2}))
    assert deployment_replicas(manifests) == {"demo-on-demand": 2, "demo-spot": 4}


def test_the_floor_wins_over_the_ratio(make_service):
    manifests = render_fleet(make_service(replicas=3, spot={"ratio": 1.0, "minOnDemand": 2}))
    assert deployment_replicas(manifests) == {"demo-on-demand": 2, "demo-spot": 1}


def test_all_spot_without_floor_renders_no_on_demand_deployment(make_service):
    manifests = render_fleet(make_service(replicas=3, spot={"ratio": 1.0, "minOnDemand": 0}))
    assert deployment_replicas(manifests) == {"demo-spot": 3}


def test_a_spot_pool_at_zero_for_now_keeps_its_deployment(make_service):
    # The HPA may grow the service back; deleting and recreating would churn.
    manifests = render_fleet(make_service(replicas=1, spot={"ratio": 0.5, "minOnDemand": 1}))
    assert deployment_replicas(manifests) == {"demo-on-demand": 1, "demo-spot": 0}


def test_every_child_carries_the_service_labels_and_namespace(make_service):
    for manifest in render_fleet(make_service(autoscaling={"enabled": True})):
        assert manifest["metadata"]["namespace"] == "voice"
        child_labels = manifest["metadata"]["labels"]
        assert child_labels["ttsfleet.io/service"] == "demo"
        assert child_labels["app.kubernetes.io/managed-by"] == "ttsfleet-operator"
        assert child_labels["app.kubernetes.io/instance"] == "demo"


def test_pods_carry_track_and_pool_and_the_service_selects_them_all(make_service):
    manifests = render_fleet(make_service(replicas=2, spot={"ratio": 0.5}))
    service = next(m for m in manifests if m["kind"] == "Service")
    selector = service["spec"]["selector"]
    for deployment in (m for m in manifests if m["kind"] == "Deployment"):
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["ttsfleet.io/track"] == "stable"
        assert pod_labels["ttsfleet.io/pool"] in ("on-demand", "spot")
        assert selector.items() <= pod_labels.items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {
            "name": "http",
            "port": 8000,
            "targetPort": "http",
            "protocol": "TCP",
            "appProtocol": "http",
        }
    ]


def test_the_hpa_scales_the_tts_service_on_queue_depth_and_gpu_utilisation(make_service):
    service = make_service(
        autoscaling={
            "enabled": True,
            "minReplicas": 2,
            "maxReplicas": 9,
            "targetQueueDepth": 3,
            "targetGPUUtilization": 70,
        }
    )
    hpa = next(m for m in render_fleet(service) if m["kind"] == "HorizontalPodAutoscaler")
    spec = hpa["spec"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert spec["scaleTargetRef"] == {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "name": "demo",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 9)
    targets = {m["pods"]["metric"]["name"]: m["pods"]["target"] for m in spec["metrics"]}
    assert targets[metrics.QUEUE_DEPTH] == {"type": "AverageValue", "averageValue": "3"}
    assert targets[metrics.GPU_UTILIZATION] == {"type": "AverageValue", "averageValue": "700m"}


def test_the_hpa_adds_fast_and_removes_slowly(make_service):
    hpa = next(
        m
        for m in render_fleet(
            make_service(autoscaling={"enabled": True, "scaleDownStabilizationSeconds": 600})
        )
        if m["kind"] == "HorizontalPodAutoscaler"
    )
    behavior = hpa["spec"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert max(p["value"] for p in behavior["scaleDown"]["policies"] if p["type"] == "Pods") == 1


def test_gpu_utilisation_percent_becomes_the_ratio_the_runtime_exports():
    assert gpu_utilization_target(80) == "800m"
    assert gpu_utilization_target(100) == "1000m"


def test_no_hpa_without_autoscaling(make_service):
    assert "HorizontalPodAutoscaler" not in {m["kind"] for m in render_fleet(make_service())}


def test_the_pdb_lets_one_pod_go_at_a_time_even_for_a_single_replica(make_service):
    pdb = next(
        m for m in render_fleet(make_service(replicas=1)) if m["kind"] == "PodDisruptionBudget"
    )
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "ttsfleet-runtime",
        "ttsfleet.io/service": "demo",
    }


def test_rendering_is_deterministic(make_service):
    service = make_service(replicas=3, spot={"ratio": 0.5}, autoscaling={"enabled": True})
    assert render_fleet(service) == render_fleet(service)


def test_hpa_never_goes_below_the_on_demand_floor(make_service):
    service = make_service(
        autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 8}, spot={"minOnDemand": 3}
    )
    hpa = next(m for m in render_fleet(service) if m["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] == 3


def test_the_longest_name_leaves_every_child_name_valid(make_service):
    # Every name a TTSService of the longest allowed name becomes (both tracks, both pools,
    # Gateway API Services and route, HPA, the API keys Secret) is valid for its kind:
    # Services are DNS-1035 labels, the rest DNS-1123 subdomains, and the service name is a
    # label value on all of them.
    import re

    from ttsfleet_operator import grammar
    from ttsfleet_operator.canary.tracks import candidate_service
    from ttsfleet_operator.render import api_keys
    from ttsfleet_operator.render.fleet import Tracks
    from ttsfleet_operator.tts_service import NAME_LENGTH_MAX

    service = make_service(
        name="t" * NAME_LENGTH_MAX,
        replicas=4,
        spot={"ratio": 0.5},
        autoscaling={"enabled": True},
        canary={"candidate": {"image": "ghcr.io/ttsfleet/runtime:0.2.0"}},
    )
    tracks = Tracks(stable=service, candidate=candidate_service(service), weight=50, gateway=True)
    manifests = render_fleet(service, tracks) + [api_keys.render_api_keys_secret(service, "k")]
    names = {m["kind"]: [] for m in manifests}
    for manifest in manifests:
        names[manifest["kind"]].append(manifest["metadata"]["name"])
        name = manifest["metadata"]["name"]
        if manifest["kind"] == "Service":
            assert re.fullmatch(grammar.DNS1035_LABEL.strip("^$"), name) and len(name) <= 63, name
        else:
            assert re.fullmatch(grammar.DNS1123_SUBDOMAIN.strip("^$"), name) and len(name) <= 63, (
                name
            )
        for value in manifest["metadata"]["labels"].values():
            assert re.fullmatch(grammar.LABEL_VALUE.strip("^$"), value) and len(value) <= 63, value
    assert len(names["Deployment"]) == 4 and len(names["Service"]) == 3 and "HTTPRoute" in names
    longest = max((name for kind in names.values() for name in kind), key=len)
    assert longest == "t" * NAME_LENGTH_MAX + "-canary-on-demand"
