"""kernels.conv_epilogue (+ residual, SnakeBeta, raw and/or activated, one pass) against
torch, with NaN-poisoned outputs so that an element the kernel never writes fails; column
j uses channel j % C (a transposed convolution's [B, T, s*Cout] output). Runs in Triton's
interpreter on a CPU."""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels import conv_epilogue
from ttsfleet_runtime.kernels.conv_epilogue import snake_epilogue

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}  # interpreter bf16 truncates


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    monkeypatch.setattr(
        conv_epilogue,
        "_empty",
        lambda like: torch.full(like.shape, float("nan"), dtype=like.dtype),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("n", "channels"), [(24, 24), (20, 20), (3 * 12, 12), (160, 32)], ids=str)
@pytest.mark.parametrize(
    ("residual", "activation", "emit_raw"),
    [(True, True, True), (True, True, False), (False, True, False), (True, False, True)],
    ids=["res-both", "res-act", "act", "res-raw"],
)
def test_matches_torch(dtype, n, channels, residual, activation, emit_raw):
    g = torch.Generator().manual_seed(0)
    y = torch.randn(2, 37, n, generator=g).to(dtype)
    res = torch.randn(2, 37, n, generator=g).to(dtype) if residual else None
    frequency = (torch.rand(channels, generator=g) + 0.5).to(dtype)
    inverse_magnitude = (torch.rand(channels, generator=g) + 0.1).to(dtype)
    factors = (frequency, inverse_magnitude) if activation else None
    raw, act = snake_epilogue(y, res, factors, emit_raw)

    total = y.double() if res is None else y.double() + res.double()
    assert (raw is None) == (not emit_raw)
    if emit_raw:
        torch.testing.assert_close(raw.double(), total, atol=TOLERANCE[dtype], rtol=0)
    assert (act is None) == (not activation)
    if activation:
        f = frequency.double().repeat(n // channels)
        m = inverse_magnitude.double().repeat(n // channels)
        want = total + m * torch.sin(total * f) ** 2
        scale = max(1.0, want.abs().max().item())
        torch.testing.assert_close(act.double(), want, atol=TOLERANCE[dtype] * scale, rtol=0)


def test_the_activation_holds_for_arguments_many_periods_out():
    # The kernel reduces sin's argument by multiples of pi first (sin^2 has period pi): a
    # reduction off by a part of pi, or a sign, shows at |y * frequency| of tens to
    # hundreds, where the codec's activations also reach.
    y = torch.linspace(-300.0, 300.0, 4096).reshape(64, 64)
    frequency = torch.full((64,), 1.7)
    inverse_magnitude = torch.full((64,), 0.5)
    _, act = snake_epilogue(y, None, (frequency, inverse_magnitude), emit_raw=False)
    want = y.double() + 0.5 * torch.sin(y.double() * 1.7) ** 2
    torch.testing.assert_close(act.double(), want, atol=2e-4, rtol=0)


def test_without_residual_the_raw_output_is_the_input():
    y = torch.randn(3, 5, 8)
    raw, act = snake_epilogue(y, None, (torch.ones(8), torch.ones(8)), emit_raw=True)
    assert raw is y and torch.isfinite(act).all()


def test_rejects_columns_that_are_not_a_multiple_of_the_channels():
    with pytest.raises(ValueError, match="multiple"):
        snake_epilogue(torch.zeros(2, 10), None, (torch.ones(4), torch.ones(4)), False)
