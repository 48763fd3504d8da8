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


@pytest.fixture(scope="session")
def tiny_custom_voice(tmp_path_factory) -> Path:
    """A tiny random CustomVoice checkpoint (seed 0) in the official layout, written once a
    session for the model tests and the server tests alike."""
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-cv"), "tiny", "CustomVoice", seed=0, progress=lambda *_: None
    )


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """A tiny random Base checkpoint (seed 0): speaker encoder and speech tokenizer
    encoder included, for the voice-cloning tests."""
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-base"), "tiny", "Base", seed=0, progress=lambda *_: None
    )


@pytest.fixture(scope="session")
def tiny_25hz_custom_voice(tmp_path_factory) -> Path:
    """A tiny random CustomVoice checkpoint (seed 0) with the 25 Hz speech tokenizer."""
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-cv-25hz"),
        "tiny",
        "CustomVoice",
        seed=0,
        tokenizer_rate_hz=25,
        progress=lambda *_: None,
    )


@pytest.fixture(scope="session")
def tiny_25hz_base(tmp_path_factory) -> Path:
    """A tiny random Base checkpoint (seed 0) with the 25 Hz speech tokenizer: its
    encoder and campplus.onnx make the voice-cloning inputs."""
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(
        tmp_path_factory.mktemp("tiny-base-25hz"),
        "tiny",
        "Base",
        seed=0,
        tokenizer_rate_hz=25,
        progress=lambda *_: None,
    )


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
