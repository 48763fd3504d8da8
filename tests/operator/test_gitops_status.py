"""GitOps tools read our status right: Argo CD's health check (the shipped Lua, run in a real
Lua 5.4 through lupa) and Flux's kstatus rules, on statuses the reconciler really writes."""

from __future__ import annotations

import copy
import pathlib
import re

import pytest
from lupa import lua54

from ttsfleet_operator.canary import state_machine as sm
from ttsfleet_operator.reconcile import Reconciler
from ttsfleet_operator.tts_service import AnalysisResult

REPO = pathlib.Path(__file__).resolve().parents[2]
HEALTH_LUA = REPO / "charts" / "ttsfleet" / "argocd" / "health.lua"


def argocd_health(obj: dict) -> tuple[str, str]:
    lua = lua54.LuaRuntime(unpack_returned_tuples=True)

    def to_lua(value):
        if isinstance(value, dict):
            return lua.table_from({k: to_lua(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([to_lua(v) for v in value])
        return value

    function = lua.eval("function(obj) " + HEALTH_LUA.read_text() + " end")
    result = function(to_lua(obj))
    return result["status"], result["message"]


def kstatus(obj: dict) -> str:
    """sigs.k8s.io/cli-utils kstatus rules for a custom resource (what Flux's health checks use):
    a stale observedGeneration is InProgress; Reconciling=True InProgress; Stalled=True Failed;
    else Current."""
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return "InProgress"
    by_type = {c["type"]: c for c in status.get("conditions", [])}
    if by_type.get("Stalled", {}).get("status") == "True":
        return "Failed"
    if by_type.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    return "Current"


def body(**spec) -> dict:
    spec.setdefault("model", {"size": "1.7B", "variant": "CustomVoice"})
    spec.setdefault("replicas", 2)
    return {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": "demo", "namespace": "voice", "uid": "uid-1", "generation": 1},
        "spec": spec,
    }


class Passes:
    def __init__(self, cluster, obj, results=()):
        self.cluster, self.obj, self.results, self.minute = cluster, obj, list(results), 0

        async def analyse(service):
            return AnalysisResult(result=self.results.pop(0), reason="scripted")

        self.reconciler = Reconciler(
            cluster, now=lambda: f"2026-11-21T17:{self.minute:02d}:00Z", analyse=analyse
        )

    async def run(self):
        written = []
        original = self.cluster.patch_status

        async def patch_status(*args):
            written.append(args[-1])
            return await original(*args)

        self.cluster.patch_status = patch_status
        await self.reconciler.reconcile(copy.deepcopy(self.obj))
        self.cluster.patch_status = original
        if written:
            merged = {**self.obj.get("status", {}), **written[-1]}
            self.obj["status"] = {k: v for k, v in merged.items() if v is not None}


async def test_a_fresh_object_is_progressing_until_the_operator_writes_status(fake_cluster):
    obj = body()
    assert argocd_health(obj)[0] == "Progressing" and kstatus(obj) == "InProgress"
    passes = Passes(fake_cluster, obj)
    await passes.run()
    assert argocd_health(obj)[0] == "Progressing" and kstatus(obj) == "InProgress"  # pods not ready
    fake_cluster.mark_deployments_ready()
    await passes.run()
    assert argocd_health(obj) == ("Healthy", "AllReplicasReady: 2 of 2 replicas ready")
    assert kstatus(obj) == "Current"
    obj["metadata"]["generation"] = 2  # a GitOps sync changed the spec; not yet observed
    assert argocd_health(obj)[0] == "Progressing" and kstatus(obj) == "InProgress"


async def test_an_invalid_spec_is_degraded_and_stalled(fake_cluster):
    obj = body(replicas=-1)
    await Passes(fake_cluster, obj).run()
    assert argocd_health(obj)[0] == "Degraded" and kstatus(obj) == "Failed"


def canary_spec() -> dict:
    return {
        "percent": 50,
        "candidate": {"image": "runtime:2"},
        "analysis": {"intervalSeconds": 60, "steps": 1, "failureLimit": 0, "inconclusiveLimit": 1},
    }


@pytest.mark.parametrize(
    ("results", "argo", "flux"),
    [
        ([], "Progressing", "InProgress"),  # step 1, before its analysis
        (
            [sm.INCONCLUSIVE],
            "Suspended",
            "Current",
        ),  # paused: nothing moves until traffic or a person
        ([sm.FAIL], "Degraded", "Failed"),  # rolled back
    ],
)
async def test_canary_phases_map_to_health(fake_cluster, results, argo, flux):
    obj = body(canary=canary_spec())
    passes = Passes(fake_cluster, obj, results)
    await passes.run()
    fake_cluster.mark_deployments_ready()
    for _ in results:
        passes.minute += 1  # the interval has passed: one analysis
        await passes.run()
    fake_cluster.mark_deployments_ready()
    await passes.run()  # same minute: no analysis due
    assert argocd_health(obj)[0] == argo, obj["status"]
    assert kstatus(obj) == flux


def test_the_gitops_page_shows_the_shipped_lua():
    page = (REPO / "docs" / "gitops.md").read_text()
    blocks = re.findall(r"```lua\n(.*?)```", page, re.S)
    assert HEALTH_LUA.read_text() in blocks
