"""kernels.linear with fp8 weights (W8A16: e4m3 codes, one float32 scale an output column)
against the float32 product the codes stand for, prologue(x) @ (codes * scale)^T + bias +
residual, for both kernel variants, every fusion flag, on shapes that are not multiples
of the blocks. Runs in Triton's interpreter on a CPU (TRITON_INTERPRET=1), which widens
e4m3 exactly as the GPU does."""

from __future__ import annotations

import itertools

import pytest
import torch

from ttsfleet_runtime.kernels import linear_table
from ttsfleet_runtime.kernels.linear import linear
from ttsfleet_runtime.kernels.linear_table import LinearConfig, config_for, default_config
from ttsfleet_runtime.model.fp8 import Fp8Weight
from ttsfleet_runtime.model.layers import rms_norm_eager, silu_mul_eager

N, K = 20, 40  # neither a multiple of any block below
EPS = 1e-6
# As tests/kernels/test_linear.py: the interpreter truncates float32 to bf16 where the GPU
# rounds; a lost or misplaced scale is off by orders of magnitude (scales here span 1e4).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
CONFIGS = {
    "gemv-m1": LinearConfig("gemv", 1, 16, 32),
    "gemv-m4": LinearConfig("gemv", 4, 32, 64),
    "dot": LinearConfig("dot", 16, 16, 32),
}
BATCHES = {"gemv-m1": [1, 3], "gemv-m4": [17, 3], "dot": [1, 17, 3]}


def _inputs(m, dtype, *, prologue, bias, residual, seed=0, k=K, n=N):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    # Output channels of magnitudes 1e-2 .. 1e2: each column's scale matters.
    magnitudes = 10.0 ** (torch.arange(n) % 5 - 2).float()
    return {
        "x": rand(m, 2 * k if prologue == "gated" else k).to(dtype),
        "weight": Fp8Weight(rand(n, k) * magnitudes[:, None] / k**0.5),
        "bias": rand(n).to(dtype) if bias else None,
        "residual": rand(m, n).to(dtype) if residual else None,
        "norm_weight": (1 + 0.5 * rand(k)).to(dtype) if prologue == "norm" else None,
    }


def _reference(x, weight, bias=None, residual=None, norm_weight=None, gated=False):
    """The eager prologue in x's dtype, then the product with the dequantized weight and
    the additions in float64."""
    if norm_weight is not None:
        x = rms_norm_eager(x, norm_weight, EPS)
    if gated:
        x = silu_mul_eager(x)
    y = x.double() @ weight.dequantized().double().t()
    if bias is not None:
        y = y + bias.double()
    return y if residual is None else y + residual.double()


def _run(inputs, *, gated=False, config=None):
    x, weight = inputs["x"], inputs["weight"]
    out = torch.full((*x.shape[:-1], weight.shape[0]), float("nan"), dtype=x.dtype)
    result = linear(
        x,
        weight.codes,
        weight_scale=weight.scale,
        bias=inputs["bias"],
        residual=inputs["residual"],
        norm_weight=inputs["norm_weight"],
        eps=EPS,
        gated=gated,
        out=out,
        config=config,
    )
    assert result is out
    return out


def _assert_close(out, ref, dtype):
    assert torch.isfinite(out).all(), "an output element was not written"
    # float32: per column, so the small-magnitude columns must be right too, not hidden
    # by the large; bf16 rounds a column of a row or two too coarsely for that.
    dim = 0 if dtype == torch.float32 else None
    err = ((out.double() - ref).norm(dim=dim) / ref.norm(dim=dim)).max().item()
    assert err < TOLERANCE[dtype], f"relative error {err:.2e}"


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("prologue", ["plain", "norm", "gated"])
def test_every_flag_combination_matches_the_dequantized_product(name, dtype, prologue):
    epilogues = itertools.product([False, True], repeat=2)
    for (bias, residual), m in zip(epilogues, itertools.cycle(BATCHES[name]), strict=False):
        inputs = _inputs(m, dtype, prologue=prologue, bias=bias, residual=residual, seed=m)
        out = _run(inputs, gated=prologue == "gated", config=CONFIGS[name])
        _assert_close(out, _reference(**inputs, gated=prologue == "gated"), dtype)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_the_eager_product_is_the_kernels(config):
    """Fp8Weight.matmul, the eager operations' product, computes what the kernel does
    for the few rows the kernel runs (linear_table.FP8_SCALED_MM_FROM)."""
    inputs = _inputs(3, torch.float32, prologue="plain", bias=False, residual=False)
    out = _run(inputs, config=config)
    assert torch.allclose(out, inputs["weight"].matmul(inputs["x"]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_out_may_be_the_residual(config):
    """The decoder layer's `x = x + down(silu_mul(h))` done in place."""
    inputs = _inputs(3, torch.bfloat16, prologue="gated", bias=False, residual=True)
    ref = _reference(**inputs, gated=True)
    residual = inputs["residual"]
    weight = inputs["weight"]
    out = linear(
        inputs["x"],
        weight.codes,
        weight_scale=weight.scale,
        residual=residual,
        gated=True,
        out=residual,
        config=config,
    )
    assert out is residual
    _assert_close(out, ref, torch.bfloat16)


@pytest.mark.parametrize("m", [1, 3, 17])
def test_the_default_fp8_configuration(m):
    inputs = _inputs(m, torch.bfloat16, prologue="norm", bias=True, residual=False)
    out = _run(inputs)
    _assert_close(out, _reference(**inputs), torch.bfloat16)


def test_fp8_codes_take_their_own_table_and_no_smaller_buckets_gemv(monkeypatch):
    entry = ("gemv", 1, 8, 2048, 4, 1)
    monkeypatch.setattr(linear_table, "FP8_TABLE", {(1, 512, 4096): entry})
    config_for.cache_clear()
    try:
        assert config_for(1, 512, 4096, fp8=True) == LinearConfig(*entry)
        # Bucket 128 unmeasured: the default's tensor-core tiles, not bucket 1's GEMV.
        assert config_for(100, 512, 4096, fp8=True) == default_config(100, 512, 4096, True)
        assert config_for(100, 512, 4096, fp8=True).variant == "dot"
        assert config_for(1, 512, 4096) == default_config(1, 512, 4096)  # bf16's table
    finally:
        config_for.cache_clear()
    # A GEMV tile of codes is twice as wide in K as a bf16 one: the same bytes a load.
    assert (
        default_config(1, 4096, 2048, fp8=True).block_k == 2 * default_config(1, 4096, 2048).block_k
    )


def test_scaled_mm_runs_from_the_tables_bucket_on(monkeypatch):
    monkeypatch.setattr(linear_table, "FP8_SCALED_MM_FROM", 16)
    wins = linear_table.fp8_scaled_mm_wins
    assert not wins(1, 512, 256) and not wins(8, 512, 256)
    assert wins(9, 512, 256) and wins(256, 512, 256)  # 9 rows: bucket 16
    assert wins(1000, 512, 256)  # prefill: the largest bucket's way


def test_bad_fp8_calls_fail_with_a_clear_message():
    weight = Fp8Weight(torch.randn(N, K))
    x = torch.randn(2, K)
    with pytest.raises(ValueError, match="float8_e4m3fn codes"):
        linear(x, torch.randn(N, K), weight_scale=weight.scale)
    with pytest.raises(ValueError, match="one an output column"):
        linear(x, weight.codes, weight_scale=weight.scale[:, :-1])
    with pytest.raises(ValueError, match="one an output column"):
        linear(x, weight.codes, weight_scale=weight.scale.double())
