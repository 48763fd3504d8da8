"""One reconcile pass against a fake API (FakeCluster in conftest: no API server
runs in unit tests; e2e/ runs the operator against a real one)."""

import logging

import pytest

from support.reconcile_passes import body, reconcile_and_keep_status
from ttsfleet_operator.log_format import configure_logging

# What a user's runtime.env may hold: it must not reach a status, an Event or a log line.
TOKEN = "hf_s3cretTokenValue0123456789"


async def test_first_pass_creates_every_child_owned_by_the_service(reconciler, fake_cluster):
    outcome = await reconciler.reconcile(body(replicas=3, spot={"ratio": 0.5}))
    assert outcome.problem is None
    assert fake_cluster.names("Deployment") == ["demo-on-demand", "demo-spot"]
    assert fake_cluster.names("Service") == ["demo"] and fake_cluster.names("ConfigMap") == [
        "demo-engine"
    ]
    for (_, _, _), obj in fake_cluster.objects.items():
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "ttsfleet.io/v1alpha1",
            "kind": "TTSService",
            "name": "demo",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    # One Event for the pass, naming every child it created.
    (created,) = [e for e in fake_cluster.events if e[:2] == ("Normal", "Created")]
    assert created[2].startswith("Created ") and "Deployment demo-spot" in created[2]


async def test_a_second_pass_with_nothing_changed_writes_nothing(reconciler, fake_cluster):
    obj = body(replicas=3, spot={"ratio": 0.5}, autoscaling={"enabled": True})
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    fake_cluster.requests.clear()
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.writes == []
    assert not (outcome.created or outcome.updated or outcome.deleted or outcome.status_written)


async def test_drift_in_a_child_is_corrected(reconciler, fake_cluster):
    obj = body(replicas=2)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    # Someone scales the Deployment by hand.
    fake_cluster.get("Deployment", "voice", "demo-on-demand")["spec"]["replicas"] = 9
    fake_cluster.requests.clear()
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert outcome.updated == ["Deployment demo-on-demand"]
    assert fake_cluster.get("Deployment", "voice", "demo-on-demand")["spec"]["replicas"] == 2
    assert [w for w in fake_cluster.writes if w[0] == "apply"] == [
        ("apply", "Deployment/demo-on-demand")
    ]


async def test_fields_added_by_the_api_server_are_not_drift(reconciler, fake_cluster):
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    deployment = fake_cluster.get("Deployment", "voice", "demo-on-demand")
    deployment["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = (
        "4000m"
    )
    fake_cluster.requests.clear()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert [w for w in fake_cluster.writes if w[0] == "apply"] == []


async def test_a_spec_change_updates_only_what_it_touches(reconciler, fake_cluster):
    obj = body(replicas=2)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    obj["spec"]["replicas"] = 4
    obj["metadata"]["generation"] = 2
    fake_cluster.requests.clear()
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert outcome.updated == ["Deployment demo-on-demand"]
    assert fake_cluster.get("Deployment", "voice", "demo-on-demand")["spec"]["replicas"] == 4


async def test_children_no_longer_rendered_are_deleted(reconciler, fake_cluster):
    obj = body(replicas=4, spot={"ratio": 0.5}, autoscaling={"enabled": True})
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert fake_cluster.names("Deployment") == ["demo-on-demand", "demo-spot"]
    obj["spec"]["spot"] = {"ratio": 0.0}
    obj["spec"]["autoscaling"] = {"enabled": False}
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert sorted(outcome.deleted) == ["Deployment demo-spot", "HorizontalPodAutoscaler demo"]
    assert fake_cluster.names("Deployment") == ["demo-on-demand"]
    assert fake_cluster.names("HorizontalPodAutoscaler") == []


async def test_objects_of_another_owner_are_left_alone(reconciler, fake_cluster):
    stranger = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "demo-old",
            "namespace": "voice",
            "uid": "x",
            "labels": {
                "ttsfleet.io/service": "demo",
                "app.kubernetes.io/managed-by": "ttsfleet-operator",
            },
            "ownerReferences": [{"uid": "someone-else", "controller": True}],
        },
        "spec": {},
    }
    fake_cluster.objects[("Deployment", "voice", "demo-old")] = stranger
    outcome = await reconciler.reconcile(body())
    assert outcome.deleted == []
    assert "demo-old" in fake_cluster.names("Deployment")


async def test_status_reports_replicas_selector_and_conditions(reconciler, fake_cluster):
    obj = body(replicas=3, spot={"ratio": 0.5})
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    status = obj["status"]
    assert status["observedGeneration"] == 1
    assert status["selector"] == "app.kubernetes.io/name=ttsfleet-runtime,ttsfleet.io/service=demo"
    assert status["pools"] == {"onDemand": 2, "spot": 1}
    assert status["readyReplicas"] == 0
    assert status["endpoint"] == "http://demo.voice.svc:8000"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (
        conditions["Ready"]["status"] == "False"
        and conditions["Ready"]["reason"] == "ReplicasNotReady"
    )
    assert conditions["Progressing"]["status"] == "True"
    assert conditions["Degraded"]["status"] == "False"

    fake_cluster.mark_deployments_ready()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert obj["status"]["readyReplicas"] == 3 and obj["status"]["replicas"] == 3
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Progressing"]["status"] == "False"


async def test_transition_time_moves_only_when_a_condition_flips(reconciler, fake_cluster):
    obj = body(replicas=1)
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    first = {c["type"]: c["lastTransitionTime"] for c in obj["status"]["conditions"]}
    fake_cluster.mark_deployments_ready()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    second = {c["type"]: c["lastTransitionTime"] for c in obj["status"]["conditions"]}
    assert second["Degraded"] == first["Degraded"]  # stayed False
    assert second["Ready"] != first["Ready"]  # False -> True


async def test_a_refused_apply_marks_the_service_degraded_and_warns(reconciler, fake_cluster):
    fake_cluster.fail_apply_kinds.add("Deployment")
    obj = body()
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert outcome.problem.reason == "ApplyFailed"
    degraded = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and "simulated" in degraded["message"]
    assert any(e[0] == "Warning" and e[1] == "ApplyFailed" for e in fake_cluster.events)


async def test_a_problem_the_status_already_reports_posts_no_second_event(reconciler, fake_cluster):
    fake_cluster.fail_apply_kinds.add("Deployment")
    obj = body()
    for _ in range(3):
        await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert [e[1] for e in fake_cluster.events if e[0] == "Warning"] == ["ApplyFailed"]

    # Another problem is news: one Event for it.
    fake_cluster.fail_apply_kinds = {"ConfigMap"}
    fake_cluster.objects.clear()
    for _ in range(2):
        await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    warnings = [(e[1], e[2].split(":")[0]) for e in fake_cluster.events if e[0] == "Warning"]
    assert warnings == [
        ("ApplyFailed", "Deployment demo-on-demand"),
        ("ApplyFailed", "ConfigMap demo-engine"),
    ]


async def test_a_stuck_rollout_is_degraded(reconciler, fake_cluster):
    obj = body()
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    deployment = fake_cluster.get("Deployment", "voice", "demo-on-demand")
    deployment["status"] = {
        "conditions": [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "timed out",
            }
        ]
    }
    await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    degraded = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ProgressDeadlineExceeded"


async def test_an_invalid_spec_is_reported_not_applied(reconciler, fake_cluster):
    obj = body(model={"size": "0.6B", "variant": "VoiceDesign"})
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert outcome.permanent and outcome.problem.reason == "InvalidSpec"
    assert fake_cluster.objects == {}
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "VoiceDesign" in ready["message"]


@pytest.fixture
def verbose_operator_logging():
    """The operator's logging as `ttsfleet operator run -v` sets it up, undone afterwards."""
    root = logging.getLogger()
    names = ("celpy", "kopf.objects")
    saved = root.handlers[:], root.level, [logging.getLogger(n).level for n in names]
    configure_logging(logging.DEBUG)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    for name, level in zip(names, saved[2], strict=True):
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    "env",
    [
        # One entry a rule refuses (the whole entry is the error's input)...
        [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "HF_TOKEN", "value": TOKEN}],
        # ...and a list-level rule (the whole list is its input).
        [{"name": "HF_TOKEN", "value": TOKEN}, {"name": "HF_TOKEN", "value": TOKEN}],
    ],
)
async def test_an_invalid_env_is_reported_without_its_values(
    reconciler, fake_cluster, capsys, verbose_operator_logging, env
):
    obj = body(runtime={"env": env})
    outcome = await reconcile_and_keep_status(reconciler, fake_cluster, obj)
    assert outcome.problem.reason == "InvalidSpec"
    message = outcome.problem.message
    assert "spec.runtime" in message and "runtime.env" in message, message
    logged = capsys.readouterr().err
    assert "reconcile failed" in logged
    for reported in (str(obj["status"]), str(fake_cluster.events), logged):
        assert TOKEN not in reported


async def test_changes_are_logged_as_structured_fields(reconciler, fake_cluster, caplog):
    caplog.set_level(logging.INFO, logger="ttsfleet_operator.reconcile")
    await reconciler.reconcile(body(replicas=2, spot={"ratio": 0.5}))
    (record,) = [r for r in caplog.records if r.getMessage() == "reconciled"]
    assert record.service == "demo" and record.namespace == "voice"
    assert "Deployment demo-spot" in record.children_created
