"""Whole reconcile passes in the operator's unit tests: a TTSService body as the API
server stores it, and a pass whose status write lands on that body, as it would there."""

from __future__ import annotations

import copy


def body(name="demo", generation=1, status=None, **spec) -> dict:
    spec.setdefault("model", {"size": "1.7B", "variant": "CustomVoice"})
    obj = {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": name, "namespace": "voice", "uid": "uid-1", "generation": generation},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


async def reconcile_and_keep_status(reconciler, fake_cluster, obj):
    """Reconcile, then store the written status on `obj` as the API server would."""
    recorded = []
    original = fake_cluster.patch_status

    async def patch_status(api_version, kind, namespace, name, status):
        recorded.append(status)
        return await original(api_version, kind, namespace, name, status)

    fake_cluster.patch_status = patch_status
    outcome = await reconciler.reconcile(copy.deepcopy(obj))
    fake_cluster.patch_status = original
    if recorded:
        obj["status"] = recorded[-1]
    return outcome
