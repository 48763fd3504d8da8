"""fp8 weights (`--weights fp8`, model/fp8.py): the decoder layers' matrices quantized at
load with a scale per output channel, the product weight-only (the activation never
quantized), computed by the fused kernel or eagerly with the same numbers; torch._scaled_mm
(activations quantized per row too) as the other way. torch 2.15 runs _scaled_mm on the
CPU too, so it is checked here, not only on a GPU."""

from __future__ import annotations

import pytest
import torch

from support.greedy import our_codes
from ttsfleet_runtime.model import fp8
from ttsfleet_runtime.model.weights import load_model


def test_each_row_is_scaled_so_that_its_largest_magnitude_is_448():
    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [1e-3, 3e-3, -1e-3]])
    codes, scale = fp8.quantize_rows(x)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (3, 1)
    assert codes.float().abs().amax(dim=1).tolist() == [448.0, 0.0, 448.0]
    assert torch.allclose(codes.float() * scale, x, rtol=2**-4)  # e4m3: 3 mantissa bits
    assert torch.equal(codes[1].float(), torch.zeros(3))  # a zero row stays zero, no NaN


def test_a_weight_keeps_one_byte_an_element_and_a_float_scale_a_row():
    weight = torch.randn(48, 32, dtype=torch.bfloat16)
    quantized = fp8.Fp8Weight(weight)
    assert quantized.shape == (48, 32)
    assert quantized.nbytes == 48 * 32 + 48 * 4
    error = (quantized.dequantized() - weight.float()).abs()
    assert (error <= weight.float().abs().amax(dim=1, keepdim=True) / 2**4).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_few_rows_get_the_weight_only_product_more_get_scaled_mm(dtype):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 96, generator=generator)
    x = torch.randn(40, 96, generator=generator).to(dtype)
    quantized = fp8.Fp8Weight(weight)
    few, many = quantized.matmul(x[:3]), quantized.matmul(x)
    assert few.dtype == many.dtype == dtype
    # 3 rows: x times the weight the codes stand for, rounded once.
    want = (x[:3].double() @ quantized.dequantized().double().t()).to(dtype)
    assert torch.allclose(few.double(), want.double(), rtol=2**-7, atol=1e-5)
    # 40 rows (bucket 64, past FP8_SCALED_MM_FROM): _scaled_mm of the rows quantized.
    assert torch.equal(many, quantized.product(*fp8.quantize_rows(x), dtype))
    exact = x.float() @ weight.t()
    weight_only = ((few.float() - exact[:3]).norm() / exact[:3].norm()).item()
    both = ((many[:3].float() - exact[:3]).norm() / exact[:3].norm()).item()
    assert weight_only < 0.04 and both < 0.06
    assert weight_only < both  # the input's quantization is error of its own


def test_fp8_replaces_the_decoder_matrices_and_halves_their_bytes(tiny_custom_voice):
    bf16 = load_model(tiny_custom_voice, "cpu", "bfloat16", max_positions=64)
    quantized = load_model(tiny_custom_voice, "cpu", "bfloat16", max_positions=64, weights="fp8")
    assert quantized.weights == "fp8"
    for model in (quantized.talker, quantized.predictor):
        for layer in model.stack.layers:
            for name in fp8.QUANTIZED_MATRICES:
                assert isinstance(getattr(layer, name), fp8.Fp8Weight), name
                assert name not in dict(layer.named_parameters())  # no bf16 copy kept
    # The heads, embeddings and norms stay as they were.
    assert torch.equal(quantized.talker.codec_head, bf16.talker.codec_head)
    assert quantized.predictor.lm_head.dtype == torch.bfloat16
    before, after = bf16.weight_bytes(), quantized.weight_bytes()
    rows = sum(
        getattr(layer, name).shape[0]
        for model in (bf16.talker, bf16.predictor)
        for layer in model.stack.layers
        for name in fp8.QUANTIZED_MATRICES
    )
    assert after["decoder_matrices"] == before["decoder_matrices"] // 2 + 4 * rows
    assert after["other"] == before["other"]


def test_a_25hz_checkpoint_quantizes_its_talker_and_has_no_predictor(tiny_25hz_custom_voice):
    model = load_model(tiny_25hz_custom_voice, "cpu", "float32", max_positions=64, weights="fp8")
    assert model.predictor is None
    assert all(isinstance(layer.qkv, fp8.Fp8Weight) for layer in model.talker.stack.layers)
    assert model.weight_bytes()["decoder_matrices"] > 0


def test_an_unknown_weights_value_is_refused_naming_the_choices(tiny_custom_voice):
    with pytest.raises(ValueError, match="weights must be one of bf16, fp8, not 'int4'"):
        load_model(tiny_custom_voice, "cpu", "float32", weights="int4")


def test_the_kernel_path_with_fp8_weights_speaks_the_eager_codes(tiny_custom_voice, monkeypatch):
    """The fused operations (Triton's interpreter here: the linear kernel on e4m3 codes,
    the row kernels) against eager torch (Fp8Weight.matmul)."""
    from ttsfleet_runtime.kernels import linear as kernel_linear
    from ttsfleet_runtime.kernels.linear_table import LinearConfig
    from ttsfleet_runtime.model import ops as talker_ops

    # One wide block per bf16 product (the heads): a few interpreted programs a call.
    wide = LinearConfig("gemv", 1, 1024, 64)
    monkeypatch.setattr(kernel_linear, "config_for", lambda m, n, k, fp8=False: wide)

    def codes(ops):
        text = "Kernels and fp8 together."
        return our_codes(
            tiny_custom_voice,
            text,
            "ryan",
            None,
            "english",
            2,
            ops=ops,
            weights="fp8",
        )

    assert torch.equal(codes(talker_ops.fused()), codes(talker_ops.EAGER))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_graphed_scaled_mm_product_is_the_emulations_to_accumulation_error():
    """_scaled_mm captured in a CUDA graph against the emulation, at the shape of a decode
    step. Not equal: Hopper's fp8 tensor cores accumulate with fewer bits than float32
    (on the H200 the graphed step's codes of a random tiny model, whose logits are nearly
    flat, parted from the emulation's after 12 codes), so the bound is a share of the
    output's scale, far below what a wrong scale or layout gives (errors of order 1)."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(2048, 1024, generator=generator).cuda()
    x = torch.randn(8, 1024, generator=generator).cuda().to(torch.bfloat16)
    quantized = fp8.Fp8Weight(weight)
    x_codes, x_scale = fp8.quantize_rows(x)
    emulated = (x_codes.float() * x_scale) @ quantized.dequantized().t()
    quantized.product(x_codes, x_scale, x.dtype)  # cuBLASLt picks its kernel uncaptured
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = quantized.product(x_codes, x_scale, x.dtype)
    graph.replay()
    torch.cuda.synchronize()
    error = (out.float() - emulated).abs().amax() / emulated.abs().amax()
    assert error < 1e-2, f"relative error {error:.2e}"
