"""KubeCluster's HTTP requests: paths, verbs, content types, query parameters.

A small aiohttp server stands in for the API server (none runs in unit tests;
e2e/ drives a real one) and records what arrives.
"""

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from ttsfleet_operator.cluster import ApiError
from ttsfleet_operator.kube_cluster import KubeCluster

# A Service whose port someone changed by hand, as the reconciler last listed it.
EDITED_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "edited",
        "namespace": "voice",
        "resourceVersion": "41",
        "labels": {"team": "speech"},
        "managedFields": [{"manager": "kubectl-patch"}],
    },
    "spec": {
        "clusterIP": "10.0.0.7",
        "ports": [{"name": "http", "port": 9999, "targetPort": "http"}],
    },
}


@pytest.fixture
async def api():
    received = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.text()
        received.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "content_type": request.headers.get("Content-Type"),
                "accept": request.headers.get("Accept"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.path.endswith("/missing"):
            return web.json_response({"kind": "Status", "message": "not found"}, status=404)
        if request.path.endswith("/refused"):
            return web.json_response(
                {"kind": "Status", "message": "spec.replicas: Invalid value"}, status=422
            )
        if (
            request.path.endswith("/edited")
            and request.method == "PATCH"
            and not any(r["content_type"] == "application/json-patch+json" for r in received)
        ):
            return web.json_response(
                {"kind": "Status", "message": 'spec.ports[1].name: Duplicate value: "http"'},
                status=422,
            )
        if request.method == "GET":
            return web.json_response({"items": [{"metadata": {"name": "x"}}]})
        return web.json_response(json.loads(body) if body else {})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = TestServer(app)
    await server.start_server()
    configuration = client.Configuration(host=str(server.make_url("")).rstrip("/"))
    cluster = KubeCluster(client.ApiClient(configuration))
    yield cluster, received
    await cluster.close()
    await server.close()


async def test_apply_is_a_forced_server_side_apply_with_our_field_manager(api):
    cluster, received = api
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "voice"},
    }
    await cluster.apply(manifest)
    (request,) = received
    assert request["method"] == "PATCH"
    assert request["path"] == "/apis/apps/v1/namespaces/voice/deployments/d"
    assert request["content_type"] == "application/apply-patch+yaml"
    assert request["query"] == {"fieldManager": "ttsfleet-operator", "force": "true"}
    assert request["body"] == manifest


async def test_list_uses_a_label_selector_and_core_paths(api):
    cluster, received = api
    items = await cluster.list("v1", "ConfigMap", "voice", {"b": "2", "a": "1"})
    assert items == [{"metadata": {"name": "x"}}]
    assert received[0]["path"] == "/api/v1/namespaces/voice/configmaps"
    assert received[0]["query"] == {"labelSelector": "a=1,b=2"}


async def test_delete_carries_a_uid_precondition_and_tolerates_missing(api):
    cluster, received = api
    await cluster.delete("autoscaling/v2", "HorizontalPodAutoscaler", "voice", "missing", "uid-7")
    (request,) = received
    assert request["method"] == "DELETE"
    assert (
        request["path"] == "/apis/autoscaling/v2/namespaces/voice/horizontalpodautoscalers/missing"
    )
    assert request["body"]["preconditions"] == {"uid": "uid-7"}
    assert request["body"]["propagationPolicy"] == "Background"


async def test_status_is_a_merge_patch_of_the_subresource(api):
    cluster, received = api
    await cluster.patch_status(
        "ttsfleet.io/v1alpha1", "TTSService", "voice", "demo", {"readyReplicas": 2}
    )
    (request,) = received
    assert request["path"] == "/apis/ttsfleet.io/v1alpha1/namespaces/voice/ttsservices/demo/status"
    assert request["content_type"] == "application/merge-patch+json"
    assert request["body"] == {"status": {"readyReplicas": 2}}


async def test_a_refusal_raises_with_the_api_servers_message(api):
    cluster, _ = api
    manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "refused", "namespace": "voice"},
    }
    with pytest.raises(ApiError) as caught:
        await cluster.apply(manifest)
    assert caught.value.status == 422 and "Invalid value" in caught.value.message


async def test_an_apply_refused_as_invalid_replaces_the_fields_once_then_applies_again(api):
    """A hand-edited list entry (a Service port) stays beside ours under server-side apply,
    and the merged object is invalid on every pass; one JSON patch (the verb RBAC grants)
    replaces the rendered fields, guarded by the resourceVersion."""
    cluster, received = api
    desired = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "edited", "namespace": "voice", "labels": {"app": "tts"}},
        "spec": {"ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }
    await cluster.apply(desired, EDITED_SERVICE)
    assert [r["content_type"] for r in received] == [
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/apply-patch+yaml",
    ]
    patch = received[1]
    assert patch["content_type"] == "application/json-patch+json"
    assert patch["query"] == {"fieldManager": "ttsfleet-operator"}
    assert patch["body"] == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {
            "op": "replace",
            "path": "/spec",
            "value": {"clusterIP": "10.0.0.7", "ports": desired["spec"]["ports"]},
        },
    ]


async def test_events_point_at_the_service(api):
    cluster, received = api
    owner = {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": "demo", "namespace": "voice", "uid": "u1"},
    }
    await cluster.emit_event(owner, "Normal", "Created", "Created Deployment demo-on-demand")
    (request,) = received
    assert request["method"] == "POST" and request["path"] == "/api/v1/namespaces/voice/events"
    event = request["body"]
    assert (
        event["involvedObject"]["uid"] == "u1" and event["involvedObject"]["kind"] == "TTSService"
    )
    assert (event["type"], event["reason"]) == ("Normal", "Created")


def test_kopf_logs_in_with_the_credentials_our_client_loaded():
    from ttsfleet_operator.kube_cluster import connection_info

    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.api_key["BearerToken"] = "Bearer s3cret"
    configuration.ssl_ca_cert = "/ca.crt"
    configuration.cert_file, configuration.key_file = "/c.crt", "/c.key"
    info = connection_info(configuration)
    assert info["server"] == "https://10.0.0.1:6443"
    assert (info["scheme"], info["token"]) == ("Bearer", "s3cret")
    assert (info["ca_path"], info["certificate_path"], info["private_key_path"]) == (
        "/ca.crt",
        "/c.crt",
        "/c.key",
    )
    assert info["insecure"] is False


async def test_create_posts_to_the_collection_with_our_field_manager(api):
    cluster, received = api
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "demo-api-keys", "namespace": "voice"},
    }
    await cluster.create(secret)
    (request,) = received
    assert (request["method"], request["path"]) == ("POST", "/api/v1/namespaces/voice/secrets")
    assert request["query"] == {"fieldManager": "ttsfleet-operator"} and request["body"] == secret
