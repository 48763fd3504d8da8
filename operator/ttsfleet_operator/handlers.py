"""kopf wiring, kept thin: every handler delegates to `Reconciler.reconcile`.

Only kopf's on.event handlers: a TTSService's watch events ask for a pass at once when
it is new or changed (`Resync.observe`; kopf's create/update handlers would patch a
diff-base annotation onto it after each change); the per-service work queue
(resync.py) runs every pass, the period's drift correction too, and a TTSService's
pass comes soon after a child's status changes or a child is deleted (child_watch.py).
The same child events keep the cache passes list children from (child_cache.py); they
come from the operator's own watches of the children (list_watch.py), not kopf's.
Logic lives in reconcile.py and render/.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

import kopf

from ttsfleet_operator import child_kinds, labels, tts_service
from ttsfleet_operator.canary import analysis
from ttsfleet_operator.canary.prometheus import Prometheus
from ttsfleet_operator.child_cache import CachedCluster
from ttsfleet_operator.child_watch import ChildWatch
from ttsfleet_operator.kube_cluster import KubeCluster, connection_info, load_configuration
from ttsfleet_operator.list_watch import ListWatch
from ttsfleet_operator.metrics import OperatorMetrics
from ttsfleet_operator.reconcile import Reconciler
from ttsfleet_operator.resync import Resync

log = logging.getLogger(__name__)

RESOURCE = {
    "group": tts_service.GROUP,
    "version": tts_service.VERSION,
    "plural": tts_service.PLURAL,
}
ANNOTATION_PREFIX = "ttsfleet.io"
# The child watches select on these labels (every child carries them: labels.service_labels).
CHILD_SELECTOR = f"{labels.MANAGED_BY}={labels.MANAGER},{labels.SERVICE}"


def _plain(body: kopf.Body) -> dict:
    # Shallow: Resync keeps its own encoded copy and changes nothing of it.
    return dict(body)


def _log_failed_pass(key: tuple[str, str], outcome: asyncio.Future) -> None:
    # A failed pass is not retried through kopf (that would write progress annotations);
    # the resync period tries again.
    if not outcome.cancelled() and outcome.exception() is not None:
        log.error(
            "pass failed",
            exc_info=outcome.exception(),
            extra={"namespace": key[0], "service": key[1]},
        )


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf keeps no diff-base: the operator registers no create/update/resume handlers
    (a TTSService's changes are told by `Resync.observe`), so none would be read, and
    kopf's own storage builds a deep copy of every watched object (children included,
    managedFields and all) on every watch event to compare with it."""

    def build(self, *, body, extra_fields=None):
        return None

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence):
        pass


def child_changed(memo: kopf.Memo, event_type: str | None, child: dict) -> None:
    """A child's watch event: keep it for the passes, and ask for its owner's pass when
    what the owner's status shows changed or the child is gone (child_watch.py)."""
    memo.cluster.observe(event_type, child)
    owner = memo.child_watch.owner_to_refresh(event_type, child)
    if owner is not None:
        memo.resync.soon(owner)


def child_watches(
    api: KubeCluster, namespaces: list[str] | None, handle: Callable[[str | None, dict], None]
) -> list[ListWatch]:
    """One watch per watched child kind and namespace served (all namespaces: None)."""
    return [
        ListWatch(api, kind, namespace, CHILD_SELECTOR, handle)
        for kind in child_kinds.WATCHED
        for namespace in (namespaces or [None])
    ]


def register(
    registry: kopf.OperatorRegistry,
    resync_seconds: float,
    kubeconfig: str | None,
    metrics: OperatorMetrics | None = None,
    prometheus_url: str | None = None,
    namespaces: list[str] | None = None,
) -> None:
    """`namespaces`: those the operator serves, as kopf is told; None for all."""
    metrics = metrics or OperatorMetrics()
    prometheus = Prometheus(prometheus_url) if prometheus_url else None

    async def analyse(service: tts_service.TTSService):
        return await analysis.analyse(
            prometheus, service.namespace, service.name, service.spec.canary.analysis
        )

    @kopf.on.login(registry=registry)
    async def login(**_) -> kopf.ConnectionInfo:
        # A registry of our own has none of kopf's default login handlers; use
        # the credentials our API client loads, so both authenticate alike.
        return kopf.ConnectionInfo(**connection_info(await load_configuration(kubeconfig)))

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
        # kopf would post an Event for every handler run (writes on every pass);
        # the reconciler posts its own Events for what it changes.
        settings.posting.enabled = False
        # Progress in our own annotations, never in status (our status schema is
        # structural and would prune kopf's fields); none is written while no kopf
        # handler but on.event is registered.
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=ANNOTATION_PREFIX
        )
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.persistence.finalizer = f"{ANNOTATION_PREFIX}/finalizer"
        # No CRD or namespace watching: fewer RBAC rules; the chart installs the CRD first.
        settings.scanning.disabled = True
        memo.api = await KubeCluster.connect(kubeconfig, metrics.count_request)
        memo.cluster = CachedCluster(memo.api)
        memo.reconciler = Reconciler(memo.cluster, analyse=analyse)
        memo.resync = Resync(metrics.instrument(memo.reconciler.reconcile), resync_seconds)
        memo.child_watch = ChildWatch()
        memo.resync_task = asyncio.create_task(memo.resync.run_forever(), name="ttsfleet-resync")

        # Our own watches of the children, not kopf's (list_watch.py says why).
        memo.child_watches = [
            asyncio.create_task(watch.run(), name=f"ttsfleet-watch-{watch.kind.plural}")
            for watch in child_watches(memo.api, namespaces, functools.partial(child_changed, memo))
        ]
        log.info("operator started", extra={"resync_seconds": resync_seconds})

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: kopf.Memo, **_) -> None:
        for task in (memo.resync_task, *memo.child_watches):
            task.cancel()
        await asyncio.gather(memo.resync_task, *memo.child_watches, return_exceptions=True)
        await memo.resync.stop()
        await memo.api.close()

    # Async, as every handler touching Resync: it holds asyncio tasks (kopf runs sync
    # handlers in threads).
    @kopf.on.event(**RESOURCE, registry=registry)
    async def remember(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_) -> None:
        if event.get("type") == "DELETED":
            memo.resync.forget(_plain(body))
            memo.reconciler.forget(body["metadata"]["uid"])
            metrics.forget(body["metadata"].get("namespace", "default"), body["metadata"]["name"])
        else:
            plain = _plain(body)
            requested = memo.resync.observe(plain)
            if requested is not None:
                # Not awaited: kopf's next event of this object need not wait for the pass.
                requested.add_done_callback(functools.partial(_log_failed_pass, Resync.key(plain)))
