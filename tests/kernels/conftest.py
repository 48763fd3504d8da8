"""Fixtures of the kernel tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def nan_conv_outputs(monkeypatch):
    """The convolution kernels' output buffers (kernels/conv1d.py `_empty`, which
    kernels/residual_unit.py shares) start as NaN, so an element never written fails."""
    from ttsfleet_runtime.kernels import conv1d

    monkeypatch.setattr(
        conv1d, "_empty", lambda shape, like: torch.full(shape, float("nan"), dtype=like.dtype)
    )
