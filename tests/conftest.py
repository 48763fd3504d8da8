"""Fixtures every test folder may use. Helpers to import live in tests/support."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The Triton kernels (ttsfleet_runtime/kernels) run in Triton's interpreter where there
# is no GPU. Triton reads this when a kernel is decorated, so it is set before any test
# module imports one.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _tiny_checkpoint(tmp_path_factory, folder: str, variant: str, rate_hz: int = 12) -> Path:
    """A tiny random checkpoint (seed 0) in the official layout, in a fresh folder."""
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp(folder),
        "tiny",
        variant,
        seed=0,
        tokenizer_rate_hz=rate_hz,
        progress=lambda *_: None,
    )


@pytest.fixture(scope="session")
def tiny_custom_voice(tmp_path_factory) -> Path:
    """A tiny random CustomVoice checkpoint, written once a session for the model tests
    and the server tests alike."""
    return _tiny_checkpoint(tmp_path_factory, "tiny-cv", "CustomVoice")


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A tiny random Base checkpoint: speaker encoder and speech tokenizer encoder
    included, for the voice-cloning tests."""
    return _tiny_checkpoint(tmp_path_factory, "tiny-base", "Base")


@pytest.fixture(scope="session")
def tiny_25hz_custom_voice(tmp_path_factory) -> Path:
    """A tiny random CustomVoice checkpoint with the 25 Hz speech tokenizer."""
    return _tiny_checkpoint(tmp_path_factory, "tiny-cv-25hz", "CustomVoice", rate_hz=25)


@pytest.fixture(scope="session")
def tiny_25hz_base(tmp_path_factory) -> Path:
    """A tiny random Base checkpoint with the 25 Hz speech tokenizer: its encoder and
    campplus.onnx make the voice-cloning inputs."""
    return _tiny_checkpoint(tmp_path_factory, "tiny-base-25hz", "Base", rate_hz=25)


@pytest.fixture(scope="session")
def bare_prometheus(tmp_path_factory):
    """A real Prometheus with no targets: PromQL is parsed and evaluated by the
    same server that will run it in production."""
    from support.prometheus import Prometheus

    prometheus = Prometheus(
        tmp_path_factory.mktemp("prometheus-bare"), {"global": {"scrape_interval": "1m"}}
    )
    try:
        prometheus.wait_ready()
        yield prometheus
    finally:
        prometheus.stop()
