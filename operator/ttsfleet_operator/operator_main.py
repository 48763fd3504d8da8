"""`ttsfleet operator run`: start kopf with our handlers, standalone (no peering CRDs)."""

from __future__ import annotations

import logging
import os

import kopf

from ttsfleet_operator import handlers
from ttsfleet_operator.log_format import configure_logging
from ttsfleet_operator.metrics import OperatorMetrics


def run(
    namespaces: list[str] | None,
    all_namespaces: bool,
    liveness: str,
    resync_seconds: float,
    kubeconfig: str | None,
    verbose: bool,
    metrics_port: int = 0,
    prometheus_url: str | None = None,
) -> int:
    configure_logging(logging.DEBUG if verbose else logging.INFO)
    if kubeconfig:
        # kopf's own login reads $KUBECONFIG; our client gets the path directly.
        os.environ["KUBECONFIG"] = kubeconfig
    metrics = OperatorMetrics()
    if metrics_port:
        metrics.serve(metrics_port)
    registry = kopf.OperatorRegistry()
    handlers.register(
        registry,
        resync_seconds=resync_seconds,
        kubeconfig=kubeconfig,
        metrics=metrics,
        prometheus_url=prometheus_url,
    )
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces or (),
        liveness_endpoint=liveness or None,
    )
    return 0
