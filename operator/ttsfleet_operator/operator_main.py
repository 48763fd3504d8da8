"""`ttsfleet operator run`: start kopf with our handlers, standalone (no peering CRDs)."""

from __future__ import annotations

import logging
import os

import kopf

from ttsfleet_operator import handlers
from ttsfleet_operator.log_format import configure_logging


def run(
    namespaces: list[str] | None,
    all_namespaces: bool,
    liveness: str,
    resync_seconds: float,
    kubeconfig: str | None,
    verbose: bool,
) -> int:
    configure_logging(logging.DEBUG if verbose else logging.INFO)
    if kubeconfig:
        # kopf's own login reads $KUBECONFIG; our client gets the path directly.
        os.environ["KUBECONFIG"] = kubeconfig
    registry = kopf.OperatorRegistry()
    handlers.register(registry, resync_seconds=resync_seconds, kubeconfig=kubeconfig)
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces or (),
        liveness_endpoint=liveness or None,
    )
    return 0
