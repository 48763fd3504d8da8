"""kernels.anti_aliased_snake against the vocoder's torch activation (upsample 2x,
SnakeBeta, downsample 2x, edges replicated), with a NaN-poisoned output so that an
element the kernel never writes fails. Runs in Triton's interpreter on a CPU."""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels import anti_aliased_snake as kernel
from ttsfleet_runtime.speech_tokenizer.rate25.vocoder import AntiAliasedSnake


@pytest.fixture(autouse=True)
def poisoned_output(monkeypatch):
    monkeypatch.setattr(
        kernel, "_empty", lambda like: torch.full(like.shape, float("nan"), dtype=like.dtype)
    )


def activation(channels: int, seed: int) -> AntiAliasedSnake:
    g = torch.Generator().manual_seed(seed)
    module = AntiAliasedSnake(channels)
    with torch.no_grad():
        module.act.alpha.copy_(torch.randn(channels, generator=g) * 0.5)
        module.act.beta.copy_(torch.randn(channels, generator=g) * 0.5)
    module.act.derive_factors()
    return module


# Lengths around the filters' reach (6 samples each side), past one program's tile, and
# long enough for tiles away from both edges (the unclamped path).
@pytest.mark.parametrize("length", [1, 2, 5, 6, 7, 13, 105, 600, 1100], ids=str)
@pytest.mark.parametrize("channels", [1, 3], ids=str)
def test_matches_the_torch_activation_in_float32(length, channels):
    module = activation(channels, seed=length)
    x = torch.randn(2, channels, length, generator=torch.Generator().manual_seed(1)) * 3
    want = module(x.double().float())
    got = kernel.anti_aliased_snake(
        x, module.lowpass, module.act.frequency, module.act.inverse_magnitude
    )
    assert got.shape == want.shape and got.dtype == x.dtype
    torch.testing.assert_close(got, want, atol=2e-5, rtol=0)


def test_bfloat16_rounds_once_at_the_end():
    module = activation(4, seed=0)
    x = (torch.randn(2, 4, 64, generator=torch.Generator().manual_seed(2)) * 2).to(torch.bfloat16)
    want = module(x.float())  # the float32 activation of the same inputs
    got = kernel.anti_aliased_snake(
        x, module.lowpass, module.act.frequency, module.act.inverse_magnitude
    )
    assert got.dtype == torch.bfloat16
    # One bf16 rounding of the result (the interpreter truncates: up to 2^-7 relative).
    torch.testing.assert_close(got.float(), want, atol=1e-2, rtol=2**-7)


def test_an_odd_filter_is_refused():
    module = activation(1, seed=0)
    with pytest.raises(ValueError, match="even number of taps"):
        kernel.anti_aliased_snake(
            torch.zeros(1, 1, 8), torch.ones(11), module.act.frequency, module.act.inverse_magnitude
        )
