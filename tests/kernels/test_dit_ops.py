"""kernels.dit_ops against the DiT's torch steps (speech_tokenizer/rate25/mel_generator.py):
the modulated LayerNorm, the gated residual with and without the next norm, and the
rotary positions on interleaved pairs. Outputs start as NaN so that an element the kernel
never writes fails. Runs in Triton's interpreter on a CPU."""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels import dit_ops
from ttsfleet_runtime.speech_tokenizer.rate25 import mel_generator


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    monkeypatch.setattr(
        dit_ops, "_empty", lambda like: torch.full(like.shape, float("nan"), dtype=like.dtype)
    )


def tensors(seed: int, *shapes, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*s, generator=g) * 2).to(dtype) for s in shapes]


def modulation(x: torch.Tensor, chunks: int, seed: int) -> list[torch.Tensor]:
    """Per-window vectors as the DiT gets them: views into one [B, 1, chunks * D] output."""
    batch, _, hidden = x.shape
    (joined,) = tensors(seed, (batch, 1, chunks * hidden), dtype=x.dtype)
    return list(joined.chunk(chunks, dim=-1))


# Hidden sizes: a power of two (the published 1,024 is one), and one that is not (masked lanes).
@pytest.mark.parametrize("hidden", [64, 48], ids=str)
def test_modulated_norm_matches_torch(hidden):
    (x,) = tensors(1, (3, 5, hidden))
    x = x + 4  # an offset the mean must remove
    scale, shift = modulation(x, 2, seed=2)
    got = dit_ops.modulated_norm(x, scale, shift)
    torch.testing.assert_close(
        got, mel_generator._modulated_norm(x, scale, shift), atol=2e-6, rtol=0
    )


@pytest.mark.parametrize("hidden", [64, 48], ids=str)
def test_gated_residual_and_the_next_norm_match_torch(hidden):
    x, y = tensors(3, (2, 7, hidden), (2, 7, hidden))
    gate, scale, shift = modulation(x, 3, seed=4)
    summed = x + gate * y
    torch.testing.assert_close(dit_ops.gated_residual(x, gate, y), summed, atol=1e-6, rtol=0)
    got_sum, got_norm = dit_ops.gated_residual_norm(x, gate, y, scale, shift)
    torch.testing.assert_close(got_sum, summed, atol=1e-6, rtol=0)
    want = mel_generator._modulated_norm(summed, scale, shift)
    torch.testing.assert_close(got_norm, want, atol=2e-6, rtol=0)


def test_bfloat16_norm_reads_the_rounded_sum_and_rounds_once():
    x, y = tensors(5, (2, 4, 64), (2, 4, 64), dtype=torch.bfloat16)
    gate, scale, shift = modulation(x, 3, seed=6)
    got_sum, got_norm = dit_ops.gated_residual_norm(x, gate, y, scale, shift)
    # The sum in float32 rounded once to bf16 (the interpreter truncates: 2^-7 relative).
    want_sum = x.float() + gate.float() * y.float()
    torch.testing.assert_close(got_sum.float(), want_sum, atol=1e-2, rtol=2**-7)
    want_norm = mel_generator._modulated_norm(got_sum.float(), scale.float(), shift.float())
    torch.testing.assert_close(got_norm.float(), want_norm, atol=1e-2, rtol=2**-7)


@pytest.mark.parametrize("heads,head_dim", [(2, 8), (3, 4)], ids=str)
def test_rotate_pairs_matches_torch(heads, head_dim):
    batch, frames = 2, 6
    q, k = tensors(7, (batch, frames, heads * head_dim), (batch, frames, heads * head_dim))
    cos, sin = mel_generator.RotaryEmbedding(head_dim)(frames, torch.device("cpu"))
    got_q, got_k = dit_ops.rotate_pairs(q, k, cos, sin, head_dim)

    def torch_rotate(t):  # the eager path: heads split, frames third
        split = t.view(batch, frames, heads, head_dim).transpose(1, 2)
        rotated = mel_generator._rotate(split, cos, sin)
        return rotated.transpose(1, 2).reshape(batch, frames, -1)

    torch.testing.assert_close(got_q, torch_rotate(q), atol=1e-6, rtol=0)
    torch.testing.assert_close(got_k, torch_rotate(k), atol=1e-6, rtol=0)
    assert not torch.equal(got_q, q)  # positions past 0 do rotate


def test_shapes_that_do_not_fit_are_refused():
    x = torch.zeros(2, 3, 8)
    with pytest.raises(ValueError, match=r"scale must be \[2, 1, 8\]"):
        dit_ops.modulated_norm(x, torch.zeros(2, 8), torch.zeros(2, 1, 8))
    with pytest.raises(ValueError, match="do not fit"):
        dit_ops.rotate_pairs(x, x, torch.zeros(3, 4), torch.zeros(3, 5), head_dim=4)
