"""The operator's own watches of its children: list, then watch from the list's version,
resume where a stream ended, list again when the version is gone; objects handed on
without managedFields.

A small aiohttp server plays the API server's list and watch protocol (e2e/ runs the
real one) and records what arrives; the client is the operator's own `KubeCluster`.
"""

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from ttsfleet_operator import child_kinds
from ttsfleet_operator.kube_cluster import KubeCluster
from ttsfleet_operator.list_watch import ListWatch

DEPLOYMENT = next(kind for kind in child_kinds.WATCHED if kind.kind == "Deployment")


def deployment(name: str, version: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "voice",
            "resourceVersion": version,
            "managedFields": [{"manager": "ttsfleet-operator"}],
        },
        "status": {"replicas": 1},
    }


def event(type_: str, obj: dict) -> bytes:
    return json.dumps({"type": type_, "object": obj}).encode() + b"\n"


# What the stand-in API server answers, in order: a listing, then watch streams.
SCRIPT = [
    ("list", {"metadata": {"resourceVersion": "10"}, "items": [deployment("a", "9")]}),
    # The first stream: a new object, a bookmark, then the server ends it (its timeout).
    ("watch", [event("ADDED", {"kind": "Deployment", **deployment("b", "11")}),
               event("BOOKMARK", {"kind": "Deployment", "metadata": {"resourceVersion": "15"}})]),
    # Resumed from the bookmark's version: a deletion, then the version is too old.
    ("watch", [event("DELETED", {"kind": "Deployment", **deployment("a", "16")}),
               event("ERROR", {"kind": "Status", "code": 410, "message": "too old"})]),
    ("list", {"metadata": {"resourceVersion": "20"}, "items": [deployment("b", "18")]}),
]  # fmt: skip


@pytest.fixture
async def api_server():
    received: list[dict] = []
    script = list(SCRIPT)
    done = asyncio.Event()
    stop = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        received.append({"path": request.path, "query": dict(request.query)})
        if not script:
            done.set()
            await stop.wait()  # a quiet watch, until the test ends
            return web.Response()
        what, answer = script.pop(0)
        assert what == ("watch" if request.query.get("watch") == "true" else "list")
        if what == "list":
            return web.json_response(answer)
        response = web.StreamResponse()
        await response.prepare(request)
        for line in answer:
            await response.write(line)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    server = TestServer(app)
    await server.start_server()
    configuration = client.Configuration(host=str(server.make_url("")).rstrip("/"))
    cluster = KubeCluster(client.ApiClient(configuration))
    yield cluster, received, done
    stop.set()
    await cluster.close()
    await server.close()


async def test_lists_then_watches_resumes_and_lists_again_when_the_version_is_gone(api_server):
    cluster, received, done = api_server
    seen = []
    watch = ListWatch(
        cluster, DEPLOYMENT, "voice", "app=x", lambda type_, obj: seen.append((type_, obj))
    )
    task = asyncio.create_task(watch.run())
    await asyncio.wait_for(done.wait(), timeout=10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    assert [(type_, obj["metadata"]["name"]) for type_, obj in seen] == [
        (None, "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
        (None, "b"),
    ]
    # Every object as the cache keeps it: its kind named, no managedFields.
    assert all(obj["kind"] == "Deployment" and obj["apiVersion"] == "apps/v1" for _, obj in seen)
    assert all("managedFields" not in obj["metadata"] for _, obj in seen)
    assert [r["path"] for r in received] == ["/apis/apps/v1/namespaces/voice/deployments"] * 5
    assert all(r["query"]["labelSelector"] == "app=x" for r in received)
    watches = [r["query"] for r in received if r["query"].get("watch") == "true"]
    # From the listing's version, then from the bookmark's; after the relist, its version.
    assert [w["resourceVersion"] for w in watches] == ["10", "15", "20"]
    assert all(w["allowWatchBookmarks"] == "true" for w in watches)


async def test_a_failed_listing_is_tried_again_after_a_pause():
    class Refusing:
        calls = 0

        async def list_and_version(self, *args):
            Refusing.calls += 1
            if Refusing.calls == 1:
                raise OSError("connection refused")
            raise asyncio.CancelledError

    pauses = []

    async def sleep(seconds):
        pauses.append(seconds)

    watch = ListWatch(Refusing(), DEPLOYMENT, None, "app=x", lambda *_: None, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await watch.run()
    assert Refusing.calls == 2 and pauses == [1.0]
