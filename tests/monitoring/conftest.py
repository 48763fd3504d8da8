"""The monitoring tests import their helpers from monitoring_support.py beside them;
the real Prometheus (`bare_prometheus`) is a fixture of tests/conftest.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
