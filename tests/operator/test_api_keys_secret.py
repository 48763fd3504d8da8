"""Auth on by default: the operator creates and owns one API keys Secret per TTSService
that names none, never reads or rewrites it, and never logs the key (FakeCluster in
conftest: no API server runs in unit tests; e2e/test_api_keys_secret.py runs this against
a real one)."""

import copy
import logging

import pytest

from ttsfleet_operator import reconcile
from ttsfleet_operator.cluster import ApiError
from ttsfleet_operator.reconcile import Reconciler, owner_reference
from ttsfleet_runtime.server.auth import parse_key_line


def body(**runtime):
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": "demo", "namespace": "voice", "uid": "uid-1", "generation": 1},
        "spec": {"model": {"size": "1.7B", "variant": "CustomVoice"}, "runtime": runtime},
    }


@pytest.fixture
def reconciler(fake_cluster):
    return Reconciler(fake_cluster, now=lambda: "2026-11-21T16:00:00Z")


def the_key(fake_cluster) -> str:
    secret = fake_cluster.get("Secret", "voice", "demo-api-keys")
    (line,) = secret["stringData"]["keys"].splitlines()
    tenant, key = parse_key_line(line)
    assert tenant == "default"
    return key


async def test_a_service_without_keys_gets_an_owned_secret_that_its_pods_mount(
    reconciler, fake_cluster
):
    outcome = await reconciler.reconcile(body())
    assert outcome.problem is None
    secret = fake_cluster.get("Secret", "voice", "demo-api-keys")
    # The same controller reference as every child (its fields: test_reconcile.py).
    assert secret["metadata"]["ownerReferences"] == [owner_reference(body())]
    assert the_key(fake_cluster).startswith("ttsf_")
    (created,) = [e for e in fake_cluster.events if e[:2] == ("Normal", "Created")]
    assert "Secret demo-api-keys" in created[2]
    deployment = fake_cluster.get("Deployment", "voice", "demo-on-demand")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "api-keys",
        "secret": {"secretName": "demo-api-keys", "items": [{"key": "keys", "path": "keys"}]},
    } in volumes
    assert fake_cluster.get("ConfigMap", "voice", "demo-engine")["data"]["TTSFLEET_API_KEYS_FILE"]


def secret_requests(fake_cluster) -> list[tuple[str, str]]:
    return [r for r in fake_cluster.requests if r[1].startswith("Secret/")]


async def test_the_secret_is_created_once_and_never_read_or_rewritten(reconciler, fake_cluster):
    await reconciler.reconcile(body())
    first = copy.deepcopy(fake_cluster.get("Secret", "voice", "demo-api-keys"))
    assert secret_requests(fake_cluster) == [("create", "Secret/demo-api-keys")]
    fake_cluster.requests.clear()
    for _ in range(3):
        await reconciler.reconcile(body())
    assert fake_cluster.get("Secret", "voice", "demo-api-keys") == first
    # Known to exist: idle passes send nothing about it (the e2e suite counts their writes).
    assert secret_requests(fake_cluster) == []


async def test_after_a_restart_the_first_pass_learns_from_a_409_and_keeps_the_key(fake_cluster):
    await Reconciler(fake_cluster).reconcile(body())
    key = the_key(fake_cluster)
    fake_cluster.requests.clear()
    fake_cluster.events.clear()
    restarted = Reconciler(fake_cluster)
    for _ in range(2):
        outcome = await restarted.reconcile(body())
        assert outcome.problem is None and outcome.created == []
    assert secret_requests(fake_cluster) == [("create", "Secret/demo-api-keys")]
    assert the_key(fake_cluster) == key
    assert not [event for event in fake_cluster.events if "Secret" in event[2]]


async def test_a_deleted_service_is_forgotten_and_its_namesake_gets_a_secret(
    reconciler, fake_cluster
):
    await reconciler.reconcile(body())
    reconciler.forget("uid-1")
    # Garbage collection removes the Secret with its owner.
    del fake_cluster.objects[("Secret", "voice", "demo-api-keys")]
    await reconciler.reconcile(body())
    assert fake_cluster.get("Secret", "voice", "demo-api-keys") is not None


async def test_what_is_remembered_is_bounded(fake_cluster, monkeypatch):
    monkeypatch.setattr(reconcile, "KNOWN_API_KEYS_SECRETS_MAX", 2)
    reconciler = Reconciler(fake_cluster)
    for uid in ("uid-1", "uid-2", "uid-3"):
        service = body()
        service["metadata"]["uid"] = uid
        await reconciler.reconcile(service)
    fake_cluster.requests.clear()
    await reconciler.reconcile(body())  # uid-1, the oldest, was forgotten: one 409
    assert secret_requests(fake_cluster) == [("create", "Secret/demo-api-keys")]


async def test_keys_a_user_put_in_the_secret_are_kept(reconciler, fake_cluster):
    await reconciler.reconcile(body())
    secret = fake_cluster.get("Secret", "voice", "demo-api-keys")
    secret["stringData"]["keys"] += "their-own-key\n"
    await reconciler.reconcile(body())
    assert fake_cluster.get("Secret", "voice", "demo-api-keys")["stringData"]["keys"].endswith(
        "their-own-key\n"
    )


async def test_a_deleted_secret_comes_back_with_a_new_key_after_a_restart(fake_cluster):
    await Reconciler(fake_cluster).reconcile(body())
    old_key = the_key(fake_cluster)
    del fake_cluster.objects[("Secret", "voice", "demo-api-keys")]
    await Reconciler(fake_cluster).reconcile(body())
    assert the_key(fake_cluster) != old_key


@pytest.mark.parametrize("runtime", [{"apiKeysSecret": "team-keys"}, {"auth": "Disabled"}])
async def test_no_secret_when_the_spec_brings_keys_or_turns_auth_off(
    reconciler, fake_cluster, runtime
):
    outcome = await reconciler.reconcile(body(**runtime))
    assert outcome.problem is None
    assert fake_cluster.names("Secret") == []
    assert not [r for r in fake_cluster.requests if r[1].startswith("Secret/")]


async def test_without_the_secret_nothing_is_applied(reconciler, fake_cluster):
    async def refuse(manifest):
        raise ApiError(
            403, 'secrets is forbidden: User "system:serviceaccount:x:y" cannot create resource'
        )

    fake_cluster.create = refuse
    outcome = await reconciler.reconcile(body())
    assert (
        outcome.problem.reason == "ApiKeysSecretFailed" and "forbidden" in outcome.problem.message
    )
    assert fake_cluster.names("Deployment") == [] and fake_cluster.names("ConfigMap") == []
    # Nothing applied, nothing counted as kept in place (the operator's metrics read this).
    assert outcome.rendered is None


async def test_a_refused_create_is_tried_again_next_pass(reconciler, fake_cluster):
    create = fake_cluster.create

    async def refuse(manifest):
        raise ApiError(403, "secrets is forbidden")

    fake_cluster.create = refuse
    await reconciler.reconcile(body())
    fake_cluster.create = create
    outcome = await reconciler.reconcile(body())
    assert outcome.problem is None and fake_cluster.get("Secret", "voice", "demo-api-keys")


async def test_a_secret_created_meanwhile_is_left_as_it_is(reconciler, fake_cluster):
    original = fake_cluster.create

    async def lose_the_race(manifest):
        racing = copy.deepcopy(manifest)
        racing["stringData"] = {"keys": "default: someone-elses\n"}
        await original(racing)
        return await original(manifest)  # 409: exists

    fake_cluster.create = lose_the_race
    outcome = await reconciler.reconcile(body())
    assert outcome.problem is None
    assert the_key(fake_cluster) == "someone-elses"


async def test_the_key_is_never_logged(reconciler, fake_cluster, caplog):
    caplog.set_level(logging.DEBUG)
    await reconciler.reconcile(body())
    await reconciler.reconcile(body())
    key = the_key(fake_cluster)
    logged = [f"{record.getMessage()} {record.__dict__}" for record in caplog.records]
    assert logged, "the pass logs what it created"
    assert not [line for line in logged if key in line]
    assert not [event for event in fake_cluster.events if key in str(event)]
