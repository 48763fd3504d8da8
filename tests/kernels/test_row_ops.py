"""The row kernels (RMSNorm, SiLU gate, prefill QK norm + RoPE, plain RoPE) against their
eager definitions in model/layers.py and speech_tokenizer/rate12/transformer.py, on the strided
views the
decoder layers pass them.

Runs on the GPU when there is one, else in Triton's interpreter (TRITON_INTERPRET=1).
"""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels.row_ops import qk_norm_rope, rms_norm, rope, silu_mul
from ttsfleet_runtime.model.layers import (
    RotaryTable,
    qk_norm_rope_eager,
    rms_norm_eager,
    silu_mul_eager,
)
from ttsfleet_runtime.speech_tokenizer.rate12.transformer import rotate_half

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The eager path rounds after every bf16 operation, the kernels once at the end (as a
# compiled kernel does); Triton's interpreter also truncates where the GPU rounds.
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 1e-2 if DEVICE == "cuda" else 2e-2}
EPS = 1e-6
DTYPES = [torch.float32, torch.bfloat16]


def relative_error(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def randn(*shape, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 96), (2, 3, 80), (1, 1, 128)])
def test_rms_norm_matches_eager(dtype, shape):
    x = randn(*shape).to(DEVICE, dtype)
    weight = (1 + 0.2 * randn(shape[-1], seed=1, scale=1.0)).to(DEVICE, dtype)
    out = rms_norm(x, weight, EPS)
    ref = rms_norm_eager(x, weight, EPS)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert relative_error(out, ref) < TOLERANCE[dtype]


def test_rms_norm_reads_a_strided_view():
    """A [:, :N] slice of a wider tensor: each row read from its own offset."""
    wide = randn(4, 160).to(DEVICE)
    x = wide[:, 16:112]
    weight = (1 + 0.2 * randn(96, seed=1, scale=1.0)).to(DEVICE)
    assert relative_error(rms_norm(x, weight, EPS), rms_norm_eager(x, weight, EPS)) < 1e-6


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 2 * 96), (2, 4, 2 * 1100)])
def test_silu_mul_matches_eager(dtype, shape):
    """The second shape spans two column blocks (1,100 > 1,024 per program)."""
    x = randn(*shape).to(DEVICE, dtype)
    out = silu_mul(x)
    ref = silu_mul_eager(x)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert relative_error(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("packed", [False, True])
def test_qk_norm_rope_matches_eager(dtype, packed):
    """q and k as the prefill passes them: views of one QKV projection [B, T, (H+2K)*d]
    (strided), with the table's prefix or a packed prompt's restarting positions."""
    B, T, H, K, d = 2, 7, 4, 2, 32
    qkv = randn(B, T, (H + 2 * K) * d).to(DEVICE, dtype)
    q, k, _ = qkv.split([H * d, K * d, K * d], dim=-1)
    q, k = q.view(B, T, H, d), k.view(B, T, K, d)
    q_weight = (1 + 0.2 * randn(d, seed=1, scale=1.0)).to(DEVICE, dtype)
    k_weight = (1 + 0.2 * randn(d, seed=2, scale=1.0)).to(DEVICE, dtype)
    rope = RotaryTable(d, 10000.0, 64).to(DEVICE)
    if packed:
        cos, sin = rope.at(torch.tensor([0, 1, 2, 0, 1, 2, 3], device=DEVICE), dtype)
    else:
        cos, sin = rope.prefix(T, dtype)
    q_out, k_out = qk_norm_rope(q, k, q_weight, k_weight, cos, sin, EPS)
    q_ref, k_ref = qk_norm_rope_eager(q, k, q_weight, k_weight, cos, sin, EPS)
    assert q_out.shape == q_ref.shape == (B, H, T, d)
    assert k_out.shape == k_ref.shape == (B, K, T, d)
    assert relative_error(q_out, q_ref) < TOLERANCE[dtype]
    assert relative_error(k_out, k_ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_matches_the_codec_transformer(dtype):
    """The codec's queries and keys side by side, a strided view of the QKV projection
    [B, n, 3H, d] -> [B, 2H, n, d], each stream at its own positions."""
    torch.manual_seed(3)
    batch, frames, heads, d = 3, 5, 3, 64  # 6 rows: a masked block of 8
    qkv = torch.randn(batch, frames, 3 * heads, d, device=DEVICE).to(dtype).transpose(1, 2)
    qk = qkv[:, : 2 * heads]
    start = torch.tensor([0, 7, 300], device=DEVICE)
    positions = (start[:, None] + torch.arange(frames, device=DEVICE)).float()
    inverse = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=DEVICE).float() / d))
    freqs = positions[..., None] * inverse
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    out = rope(qk, cos, sin)
    assert out.shape == (batch, 2 * heads, frames, d) and out.is_contiguous()
    want = torch.addcmul(qk * cos, rotate_half(qk), sin)
    assert relative_error(out, want) < TOLERANCE[dtype]
