"""The model cache the operator manages: a claim and a fill Job per revision, pods that
mount the Ready one and never download, a new revision filled beside the old one.

Reconcile passes run against FakeCluster (conftest: no API server in unit tests); the
job controller's and the PV controller's part (a Job's conditions, a claim's phase,
creation times) is written here into the fake's objects, as those controllers would.
e2e/test_model_cache.py runs the same story against a real API server.
"""

from __future__ import annotations

import copy
import subprocess

import pytest
from pydantic import ValidationError

from support.reconcile_passes import body as tts_body
from support.reconcile_passes import reconcile_and_keep_status
from ttsfleet_operator import labels, model_cache
from ttsfleet_operator.gpu_classes import MEASURED_STARTUP_SECONDS
from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.render.deployment import STARTUP_PROBE_PERIOD_SECONDS
from ttsfleet_operator.render.model_cache import cache_claim_name
from ttsfleet_runtime.model_cache import (
    CHECKPOINT_DIR,
    COMPILE_CACHE_DIR,
    FILLS_DIR,
    PERMANENT_FAILURES,
)

CACHE = {"enabled": True}
MODEL = {"size": "0.6B", "variant": "Base", "revision": "v1", "cache": CACHE}


def kinds(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


def runtime_container(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]["containers"][0]


# --- rendering ---------------------------------------------------------------------------


def test_a_cache_renders_its_claim_and_fill_job_before_the_deployments(make_service):
    manifests = render_fleet(make_service(model=MODEL))
    order = [m["kind"] for m in manifests]
    assert order.index("PersistentVolumeClaim") < order.index("Job") < order.index("Deployment")
    (claim,) = kinds(manifests, "PersistentVolumeClaim")
    (job,) = kinds(manifests, "Job")
    assert claim["metadata"]["name"] == job["metadata"]["name"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "20Gi"}},
    }
    fetch = job["spec"]["template"]["spec"]["containers"][0]
    assert fetch["args"] == [
        "fetch",
        "Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        "--revision",
        "v1",
        "--out",
        "/models",
    ]
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": "model", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in (
        volumes
    )


def test_pods_mount_the_checkpoint_read_only_and_never_download(make_service):
    service = make_service(model=MODEL)
    manifests = render_fleet(service)
    (deployment,) = kinds(manifests, "Deployment")
    (configmap,) = kinds(manifests, "ConfigMap")
    pod = deployment["spec"]["template"]["spec"]
    assert {
        "name": "model",
        "persistentVolumeClaim": {"claimName": cache_claim_name(service)},
    } in pod["volumes"]
    mounts = [m for m in runtime_container(deployment)["volumeMounts"] if m["name"] == "model"]
    # The whole volume read-only; the compile cache's subdirectory alone writable.
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in mounts
    (writable,) = [m for m in mounts if not m.get("readOnly")]
    assert writable["subPath"] == COMPILE_CACHE_DIR
    assert configmap["data"]["TTSFLEET_MODEL"] == f"/models/{CHECKPOINT_DIR}"
    assert "TTSFLEET_MODEL_REVISION" not in configmap["data"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in runtime_container(deployment)["env"]


def test_compiled_kernels_outlive_the_pod_on_the_cache_else_its_container(make_service):
    cached = make_service(model=MODEL)
    (deployment,) = kinds(render_fleet(cached), "Deployment")
    (configmap,) = kinds(render_fleet(cached), "ConfigMap")
    mounts = {m["mountPath"]: m for m in runtime_container(deployment)["volumeMounts"]}
    directory = configmap["data"]["TTSFLEET_COMPILE_CACHE_DIR"]
    assert mounts[directory] == {
        "name": "model",
        "mountPath": directory,
        "subPath": COMPILE_CACHE_DIR,
    }
    # Without a cache: the pod's scratch emptyDir (a restarted container keeps it).
    uncached = make_service(model={"size": "0.6B", "variant": "Base"})
    (deployment,) = kinds(render_fleet(uncached), "Deployment")
    (configmap,) = kinds(render_fleet(uncached), "ConfigMap")
    directory = configmap["data"]["TTSFLEET_COMPILE_CACHE_DIR"]
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (scratch,) = [
        m
        for m in runtime_container(deployment)["volumeMounts"]
        if directory.startswith(m["mountPath"] + "/")
    ]
    assert "emptyDir" in volumes[scratch["name"]] and not scratch.get("readOnly")


def test_the_cache_name_follows_what_and_where_it_stores_not_the_image(make_service):
    base = cache_claim_name(make_service(model=MODEL))
    assert base.startswith("demo-model-")
    for change in (
        {"revision": "v2"},
        {"size": "1.7B", "variant": "CustomVoice"},
        {"cache": {**CACHE, "size": "40Gi"}},
        {"cache": {**CACHE, "storageClassName": "fast"}},
        {"cache": {**CACHE, "accessMode": "ReadWriteOnce"}},
    ):
        assert cache_claim_name(make_service(model={**MODEL, **change})) != base, change
    same = make_service(model=MODEL, runtime={"image": "registry.local/runtime:2"})
    assert cache_claim_name(same) == base


def test_permanent_fill_failures_fail_the_job_at_once(make_service):
    (job,) = kinds(render_fleet(make_service(model=MODEL)), "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    fail = next(rule for rule in rules if rule["action"] == "FailJob")
    assert fail["onExitCodes"]["values"] == [f.exit_code for f in PERMANENT_FAILURES]
    # Among them a malformed repository id or revision, and a link planted in the volume.
    by_reason = {f.reason: f.exit_code for f in PERMANENT_FAILURES}
    for reason in ("HubUnauthorized", "RevisionNotFound", "InvalidReference", "UnsafeVolume"):
        assert by_reason[reason] in fail["onExitCodes"]["values"], reason
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_a_drained_fill_pod_is_ignored_by_a_rule_older_api_servers_accept(make_service):
    """API servers before 1.31 refuse an onPodConditions entry without `status`."""
    (job,) = kinds(render_fleet(make_service(model=MODEL)), "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    ignore = next(rule for rule in rules if rule["action"] == "Ignore")
    assert ignore["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


def test_the_hub_token_reaches_the_fill_job_only_from_its_secret(make_service):
    token = {"name": "hub", "key": "token"}
    manifests = render_fleet(
        make_service(model={**MODEL, "cache": {**CACHE, "hubTokenSecret": token}})
    )
    (job,) = kinds(manifests, "Job")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": token}} in env
    (deployment,) = kinds(manifests, "Deployment")
    assert all(e["name"] != "HF_TOKEN" for e in runtime_container(deployment)["env"])


def test_no_runtime_selector_counts_the_fill_pods(make_service):
    (job,) = kinds(render_fleet(make_service(model=MODEL)), "Job")
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    selector = labels.pod_selector("demo")
    assert not all(pod_labels.get(key) == value for key, value in selector.items())


def test_a_cache_needs_a_hub_source(make_service):
    with pytest.raises(ValidationError, match="model.cache is filled from the hub"):
        make_service(model={**MODEL, "revision": None, "source": {"pvc": {"claimName": "mine"}}})


def test_a_canary_model_revision_is_not_served_from_a_cache(make_service):
    with pytest.raises(
        ValidationError, match="canary modelRevision is not served from model.cache"
    ):
        make_service(model=MODEL, canary={"candidate": {"modelRevision": "v2"}})
    make_service(model=MODEL, canary={"candidate": {"image": "registry.local/runtime:2"}})


# --- the startupProbe budget -------------------------------------------------------------


def startup_seconds(deployment: dict) -> int:
    probe = runtime_container(deployment)["startupProbe"]
    return probe["periodSeconds"] * probe["failureThreshold"]


def test_the_startup_budget_is_the_measured_startup_doubled_plus_a_download(make_service):
    h100 = {"gpu": {"class": "h100"}}
    model = {"size": "1.7B", "variant": "CustomVoice"}
    (downloading,) = kinds(render_fleet(make_service(model=model, **h100)), "Deployment")
    (cached,) = kinds(
        render_fleet(make_service(model={**model, "cache": CACHE}, **h100)), "Deployment"
    )
    # The budget in whole probe periods, rounded up.
    measured = MEASURED_STARTUP_SECONDS["h100", "1.7B"]
    assert 0 <= startup_seconds(cached) - 2 * measured < STARTUP_PROBE_PERIOD_SECONDS
    assert 0 <= startup_seconds(downloading) - (2 * measured + 600) < STARTUP_PROBE_PERIOD_SECONDS
    (explicit,) = kinds(
        render_fleet(make_service(model=model, runtime={"startupTimeoutSeconds": 1200})),
        "Deployment",
    )
    assert startup_seconds(explicit) == 1200


# --- the phase ---------------------------------------------------------------------------


def claim(name="c", phase="Bound", created="2026-11-21T16:00:00Z", deleting=False):
    metadata = {"name": name, "creationTimestamp": created, "uid": "claim-uid"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T16:05:00Z"
    return {"metadata": metadata, "status": {"phase": phase}}


def job(status=None, created="2026-11-21T16:00:01Z"):
    return {"metadata": {"name": "c", "creationTimestamp": created}, "status": status or {}}


def failed(reason, message):
    return {
        "conditions": [{"type": "Failed", "status": "True", "reason": reason, "message": message}]
    }


COMPLETE = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}


@pytest.mark.parametrize(
    ("live_claim", "live_job", "phase", "reason"),
    [
        (None, None, "Pending", "ClaimCreating"),
        (claim(), None, "Pending", "FillCreating"),
        (claim(phase="Pending"), job({"active": 1}), "Pending", "ClaimPending"),
        (claim(), job({"active": 1}), "Pending", "FillPending"),
        (claim(), job({"active": 1, "ready": 1}), "Downloading", "Downloading"),
        (claim(), job(COMPLETE), "Ready", "Filled"),
        (claim(deleting=True), job(COMPLETE), "Pending", "ClaimDeleting"),
        # The claim was deleted and created again after this Job filled its namesake.
        (claim(created="2026-11-21T17:00:00Z"), job(COMPLETE), "Pending", "FillCreating"),
        (
            claim(),
            job(
                failed(
                    "PodFailurePolicy",
                    "Container fetch for pod voice/c-x failed with exit code 4 matching FailJob"
                    " rule at index 1",
                )
            ),
            "Failed",
            "RevisionNotFound",
        ),
        (
            claim(),
            job(
                failed(
                    "PodFailurePolicy",
                    "Container fetch for pod voice/c-x failed with exit code 3 matching FailJob"
                    " rule at index 1",
                )
            ),
            "Failed",
            "HubUnauthorized",
        ),
        (
            claim(),
            job(failed("BackoffLimitExceeded", "Job has reached the specified backoff limit")),
            "Failed",
            "BackoffLimitExceeded",
        ),
    ],
)
def test_the_phase_follows_the_claim_and_the_fill_job(live_claim, live_job, phase, reason):
    assert model_cache.phase_of(live_claim, live_job)[:2] == (phase, reason)


# --- reconcile passes --------------------------------------------------------------------


def body(**spec) -> dict:
    spec.setdefault("model", copy.deepcopy(MODEL))
    return tts_body(**spec)


def job_controller_sets(fake_cluster, name: str, status: dict) -> None:
    fake_cluster.get("Job", "voice", name)["status"] = copy.deepcopy(status)


async def serving_its_first_cache(reconciler, fake_cluster, obj) -> str:
    """Passes until `obj`'s pods serve its first cache, filled; the cache's name."""
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    name = obj["status"]["modelCache"]["claimName"]
    job_controller_sets(fake_cluster, name, COMPLETE)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    fake_cluster.mark_deployments_ready()
    return name


def condition(obj: dict, type_: str) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def mounted_claim(fake_cluster) -> str:
    deployment = fake_cluster.get("Deployment", "voice", "demo-on-demand")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    return next(v for v in volumes if v["name"] == "model")["persistentVolumeClaim"]["claimName"]


async def test_pods_start_only_once_the_first_cache_is_ready(reconciler, fake_cluster):
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    name = obj["status"]["modelCache"]["claimName"]
    assert fake_cluster.names("PersistentVolumeClaim") == [name]
    assert fake_cluster.names("Job") == [name]
    assert fake_cluster.names("Deployment") == []
    assert obj["status"]["modelCache"]["phase"] == "Pending"
    assert condition(obj, "Ready")["reason"] == "ModelCachePending"
    assert condition(obj, "Progressing")["reason"] == "ModelCacheFilling"

    job_controller_sets(fake_cluster, name, COMPLETE)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert obj["status"]["modelCache"]["phase"] == "Ready"
    assert obj["status"]["modelCache"]["servingClaimName"] == name
    assert mounted_claim(fake_cluster) == name


async def test_a_new_revision_fills_a_new_cache_then_the_pods_move_and_the_old_goes(
    reconciler, fake_cluster
):
    obj = body()
    old = await serving_its_first_cache(reconciler, fake_cluster, obj)
    deployment_before = copy.deepcopy(fake_cluster.get("Deployment", "voice", "demo-on-demand"))

    obj["spec"]["model"]["revision"] = "v2"
    obj["metadata"]["generation"] = 2
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    new = obj["status"]["modelCache"]["claimName"]
    assert new != old
    assert sorted(fake_cluster.names("PersistentVolumeClaim")) == sorted([old, new])
    # The pods keep serving the old cache, untouched, while the new one fills.
    assert "Deployment demo-on-demand" not in outcome.updated
    assert (
        fake_cluster.get("Deployment", "voice", "demo-on-demand")["spec"]
        == (deployment_before["spec"])
    )
    assert condition(obj, "Ready")["status"] == "True"
    assert condition(obj, "Progressing")["reason"] == "ModelCacheFilling"

    job_controller_sets(fake_cluster, new, COMPLETE)
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert mounted_claim(fake_cluster) == new
    assert fake_cluster.names("PersistentVolumeClaim") == [new]
    assert fake_cluster.names("Job") == [new]
    assert f"PersistentVolumeClaim {old}" in outcome.deleted


async def test_a_failed_fill_says_why_and_the_old_cache_keeps_serving(reconciler, fake_cluster):
    obj = body()
    old = await serving_its_first_cache(reconciler, fake_cluster, obj)

    obj["spec"]["model"]["revision"] = "no-such-revision"
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    new = obj["status"]["modelCache"]["claimName"]
    job_controller_sets(
        fake_cluster,
        new,
        failed(
            "PodFailurePolicy",
            f"Container fetch for pod voice/{new}-abcde failed with exit code 4 matching FailJob"
            " rule at index 1",
        ),
    )
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    cache = obj["status"]["modelCache"]
    assert (cache["phase"], cache["reason"]) == ("Failed", "RevisionNotFound")
    assert cache["servingClaimName"] == old and mounted_claim(fake_cluster) == old
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ModelCacheFailed")
    assert "RevisionNotFound" in degraded["message"]
    assert condition(obj, "Ready")["status"] == "True"

    # Fixing the spec (back to the revision served) asks for the serving cache again.
    obj["spec"]["model"]["revision"] = "v1"
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.names("PersistentVolumeClaim") == [old]
    assert condition(obj, "Degraded")["status"] == "False"


async def test_a_cache_deleted_by_hand_is_created_and_filled_again(reconciler, fake_cluster):
    obj = body(replicas=0)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    name = obj["status"]["modelCache"]["claimName"]
    fake_cluster.get("PersistentVolumeClaim", "voice", name)["metadata"]["creationTimestamp"] = (
        "2026-11-21T16:00:00Z"
    )
    fake_cluster.get("Job", "voice", name)["metadata"]["creationTimestamp"] = "2026-11-21T16:00:01Z"
    job_controller_sets(fake_cluster, name, COMPLETE)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert obj["status"]["modelCache"]["phase"] == "Ready"

    # Deleted by hand: PVC protection holds it while the fill's finished pod mounts it, so
    # the pass deletes the fill Job (and creates none while the claim is going).
    claim = fake_cluster.get("PersistentVolumeClaim", "voice", name)
    claim["metadata"]["deletionTimestamp"] = "2026-11-21T16:20:00Z"
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert f"Job {name}" in outcome.deleted and fake_cluster.names("Job") == []
    assert obj["status"]["modelCache"]["reason"] == "ClaimDeleting"
    # Gone now; the next pass creates it.
    del fake_cluster.objects[("PersistentVolumeClaim", "voice", name)]
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.names("PersistentVolumeClaim") == [name]
    assert fake_cluster.names("Job") == [name]
    assert fake_cluster.get("Job", "voice", name)["status"] == {}
    assert obj["status"]["modelCache"]["phase"] == "Pending"


async def test_a_finished_fill_of_an_earlier_claim_of_the_same_name_is_replaced(
    reconciler, fake_cluster
):
    obj = body(replicas=0)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    name = obj["status"]["modelCache"]["claimName"]
    fake_cluster.get("Job", "voice", name)["metadata"]["creationTimestamp"] = "2026-11-21T16:00:01Z"
    job_controller_sets(fake_cluster, name, COMPLETE)
    # The claim was deleted and created again (between two passes) after this Job filled it.
    fake_cluster.get("PersistentVolumeClaim", "voice", name)["metadata"]["creationTimestamp"] = (
        "2026-11-21T16:30:00Z"
    )
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert f"Job {name}" in outcome.deleted and f"Job {name}" in outcome.created
    assert obj["status"]["modelCache"]["phase"] == "Pending"
    assert fake_cluster.get("Job", "voice", name)["status"] == {}


async def test_a_fill_job_that_has_not_completed_is_replaced_when_its_rendering_changes(
    reconciler, fake_cluster
):
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    name = obj["status"]["modelCache"]["claimName"]
    job_controller_sets(fake_cluster, name, failed("PodFailurePolicy", "exit code 3"))
    obj["spec"]["model"]["cache"] = {**CACHE, "hubTokenSecret": {"name": "hub", "key": "token"}}
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert f"Job {name}" in outcome.deleted and f"Job {name}" in outcome.created
    env = fake_cluster.get("Job", "voice", name)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert any(e["name"] == "HF_TOKEN" for e in env)

    # A completed fill stands whatever changes in its rendering (the image, say).
    job_controller_sets(fake_cluster, name, COMPLETE)
    obj["spec"]["runtime"] = {"image": "registry.local/runtime:2"}
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert not [item for item in outcome.deleted + outcome.created if item.startswith("Job")]


async def test_turning_the_cache_off_deletes_it_and_pods_download_again(reconciler, fake_cluster):
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    name = obj["status"]["modelCache"]["claimName"]
    job_controller_sets(fake_cluster, name, COMPLETE)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    obj["spec"]["model"] = {**MODEL, "cache": {"enabled": False}}
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.names("PersistentVolumeClaim") == [] and fake_cluster.names("Job") == []
    assert obj["status"].get("modelCache") is None
    pod = fake_cluster.get("Deployment", "voice", "demo-on-demand")["spec"]["template"]["spec"]
    assert all(v["name"] != "model" for v in pod["volumes"])


# --- pre-warming -------------------------------------------------------------------------

PREWARM = {**CACHE, "prewarm": "PageCache"}


def test_prewarm_reads_the_cache_on_every_node_of_the_gpu_class(make_service):
    service = make_service(model={**MODEL, "cache": PREWARM}, gpu={"class": "l4"})
    (daemonset,) = kinds(render_fleet(service), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    tolerated = {t.get("key") for t in pod["tolerations"]}
    assert {"nvidia.com/gpu", "ttsfleet.io/spot"} <= tolerated
    assert pod["volumes"] == [
        {
            "name": "model",
            "persistentVolumeClaim": {"claimName": cache_claim_name(service), "readOnly": True},
        }
    ]
    (container,) = pod["containers"]
    # Pages read are charged to the pod: a memory limit would evict them as they are read.
    assert "limits" not in container["resources"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert not all(pod_labels.get(k) == v for k, v in labels.pod_selector("demo").items())
    assert kinds(render_fleet(make_service(model=MODEL)), "DaemonSet") == []


def test_prewarm_reads_the_files_behind_the_fills_link(make_service, tmp_path):
    """The checkpoint is the fill's link to its folder (ttsfleet_runtime.model_cache): the
    rendered script, run on such a volume, reads every file behind it."""
    volume = tmp_path / "volume"
    (volume / FILLS_DIR / "abc" / "speech_tokenizer").mkdir(parents=True)
    (volume / FILLS_DIR / "abc" / "config.json").write_bytes(b"config")
    (volume / FILLS_DIR / "abc" / "speech_tokenizer" / "model.safetensors").write_bytes(b"w")
    (volume / CHECKPOINT_DIR).symlink_to(f"{FILLS_DIR}/abc")
    service = make_service(model={**MODEL, "cache": PREWARM})
    (daemonset,) = kinds(render_fleet(service), "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    shell, flag, script = container["command"]
    (mount,) = container["volumeMounts"]
    here = (
        script.replace(mount["mountPath"], str(volume))
        .replace("/dev/null", str(tmp_path / "read"))
        .replace("exec sleep infinity", "true")
    )
    subprocess.run([shell, flag, here], check=True, capture_output=True, timeout=30)
    assert sorted((tmp_path / "read").read_bytes()) == sorted(b"configw")


def test_prewarm_needs_a_volume_every_node_can_mount(make_service):
    with pytest.raises(ValidationError, match="needs accessMode ReadWriteMany"):
        make_service(model={**MODEL, "cache": {**PREWARM, "accessMode": "ReadWriteOnce"}})


async def test_prewarm_follows_the_serving_cache(reconciler, fake_cluster):
    obj = body(model={**MODEL, "cache": PREWARM})
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.names("DaemonSet") == []  # nothing to read before a cache is Ready
    name = obj["status"]["modelCache"]["claimName"]
    job_controller_sets(fake_cluster, name, COMPLETE)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    (daemonset,) = [o for (k, _, _), o in fake_cluster.objects.items() if k == "DaemonSet"]
    volume = daemonset["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"]["claimName"] == name
