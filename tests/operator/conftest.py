"""Shared fixtures of the operator tests: samples, a TTSService builder and a fake API."""

from __future__ import annotations

import copy
import uuid

import pytest

from ttsfleet_operator.cluster import ApiError
from ttsfleet_operator.reconcile import Reconciler
from ttsfleet_operator.tts_service import TTSService


@pytest.fixture
def make_service():
    """Build a validated TTSService from spec overrides (a plain dict merged in)."""

    def make(name: str = "demo", namespace: str = "voice", **spec) -> TTSService:
        spec.setdefault("model", {"size": "1.7B", "variant": "CustomVoice"})
        return TTSService.model_validate(
            {
                "apiVersion": "ttsfleet.io/v1alpha1",
                "kind": "TTSService",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": "uid-" + name,
                    "generation": 1,
                },
                "spec": spec,
            }
        )

    return make


class FakeCluster:
    """In-memory stand-in for the Kubernetes API, used because no API server runs
    in unit tests (the e2e suite runs the operator against a real one).

    It keeps objects by (kind, namespace, name), applies by replacing the fields
    sent (enough for one field manager), bumps generation when spec changes, and
    records every request so tests can count writes.
    """

    def __init__(self):
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.events: list[tuple[str, str, str]] = []
        self.fail_apply_kinds: set[str] = set()
        # (apiVersion, kind) the fake API server serves beyond the built-in kinds (e.g. HTTPRoute).
        self.served: set[tuple[str, str]] = set()

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] not in ("list", "discovery", "get")]

    async def list(self, api_version, kind, namespace, selector):
        self.requests.append(("list", kind))
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in sorted(self.objects.items())
            if k == kind
            and ns == namespace
            and all(
                obj["metadata"].get("labels", {}).get(key) == value
                for key, value in selector.items()
            )
        ]

    async def serves(self, api_version, kind):
        self.requests.append(("discovery", kind))
        return (api_version, kind) in self.served

    async def create(self, manifest):
        kind, meta = manifest["kind"], manifest["metadata"]
        self.requests.append(("create", f"{kind}/{meta['name']}"))
        key = (kind, meta["namespace"], meta["name"])
        if key in self.objects:
            raise ApiError(409, f"{kind} {meta['name']} already exists")
        stored = copy.deepcopy(manifest)
        stored["metadata"].update(uid=str(uuid.uuid4()), generation=1, resourceVersion="1")
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def apply(self, manifest, live=None):
        kind, meta = manifest["kind"], manifest["metadata"]
        self.requests.append(("apply", f"{kind}/{meta['name']}"))
        if kind in self.fail_apply_kinds:
            raise ApiError(422, f"{kind} is invalid: simulated")
        key = (kind, meta["namespace"], meta["name"])
        old = self.objects.get(key)
        stored = copy.deepcopy(manifest)
        stored["metadata"]["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        generation = old["metadata"]["generation"] if old else 1
        if old and old.get("spec") != stored.get("spec"):
            generation += 1
        stored["metadata"]["generation"] = generation
        stored["status"] = old.get("status", {}) if old else {}
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def delete(self, api_version, kind, namespace, name, uid):
        self.requests.append(("delete", f"{kind}/{name}"))
        key = (kind, namespace, name)
        if key in self.objects and self.objects[key]["metadata"]["uid"] == uid:
            del self.objects[key]

    async def patch_status(self, api_version, kind, namespace, name, status):
        self.requests.append(("patch_status", f"{kind}/{name}"))
        return {"status": status}

    async def emit_event(self, owner, type_, reason, message):
        self.requests.append(("event", reason))
        self.events.append((type_, reason, message))

    # Helpers for tests: what controllers and users would do to live objects.
    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        return self.objects.get((kind, namespace, name))

    def names(self, kind: str) -> list[str]:
        return sorted(name for (k, _, name) in self.objects if k == kind)

    def mark_deployments_ready(self) -> None:
        for (kind, _, _), obj in self.objects.items():
            if kind == "Deployment":
                replicas = obj["spec"]["replicas"]
                obj["status"] = {
                    "observedGeneration": obj["metadata"]["generation"],
                    "replicas": replicas,
                    "updatedReplicas": replicas,
                    "readyReplicas": replicas,
                    "availableReplicas": replicas,
                }


@pytest.fixture
def fake_cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def reconciler(fake_cluster):
    """A Reconciler over the fake API whose clock moves a minute a call."""
    minutes = iter(range(60))
    return Reconciler(fake_cluster, now=lambda: f"2026-11-21T16:{next(minutes):02d}:00Z")
