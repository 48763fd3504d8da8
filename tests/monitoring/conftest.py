"""Fixtures of the monitoring tests. Helpers live in monitoring_support.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from support.prometheus import Prometheus  # noqa: E402


@pytest.fixture(scope="session")
def bare_prometheus(tmp_path_factory):
    """A real Prometheus with no targets: PromQL is parsed and evaluated by the
    same server that will run it in production."""
    prometheus = Prometheus(tmp_path_factory.mktemp("prometheus-bare"), {"global": {"scrape_interval": "1m"}})
    try:
        prometheus.wait_ready()
        yield prometheus
    finally:
        prometheus.stop()
