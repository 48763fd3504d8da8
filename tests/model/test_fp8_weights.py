"""fp8 weights (`--weights fp8`, model/fp8.py): the decoder layers' matrices quantized at
load with a scale per output channel, activations with a scale per row, and the product
computed by torch._scaled_mm or by its emulation with the same numbers. torch 2.15 runs
_scaled_mm on the CPU too, so the two ways are compared here, not only on a GPU."""

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
    quantized = fp8.Fp8Weight(weight, scaled_mm=False)
    assert quantized.shape == (48, 32)
    assert quantized.nbytes == 48 * 32 + 48 * 4
    error = (quantized.dequantized() - weight.float()).abs()
    assert (error <= weight.float().abs().amax(dim=1, keepdim=True) / 2**4).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scaled_mm_and_the_emulation_compute_the_same_product(dtype):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 96, generator=generator)
    x = torch.randn(5, 96, generator=generator).to(dtype)
    emulated = fp8.Fp8Weight(weight, scaled_mm=False).matmul(x)
    scaled_mm = fp8.Fp8Weight(weight, scaled_mm=True).matmul(x)
    assert emulated.dtype == scaled_mm.dtype == dtype
    # The same fp8 operands and scales; only the order of the float32 sums may differ.
    assert torch.allclose(emulated.float(), scaled_mm.float(), rtol=2**-7, atol=1e-5)
    exact = x.float() @ weight.t()
    assert (emulated.float() - exact).norm() / exact.norm() < 0.06


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


def test_the_scaled_mm_model_speaks_the_emulated_models_codes(tiny_custom_voice):
    def codes(scaled_mm: bool):
        return our_codes(
            tiny_custom_voice,
            "Eight bits a weight.",
            "ryan",
            None,
            "english",
            6,
            weights="fp8",
            fp8_scaled_mm=scaled_mm,
        )

    emulated = codes(False)
    assert len(emulated) == 6
    assert torch.equal(codes(True), emulated)


def test_the_kernel_path_with_fp8_weights_speaks_the_eager_codes(tiny_custom_voice, monkeypatch):
    """The fused operations (Triton's interpreter here: the fp8 input kernel, the row
    kernels) with _scaled_mm, against eager torch with the emulated product."""
    from ttsfleet_runtime.kernels import linear as kernel_linear
    from ttsfleet_runtime.kernels.linear_table import LinearConfig
    from ttsfleet_runtime.model import ops as talker_ops

    # One wide block per bf16 product (the heads): a few interpreted programs a call.
    wide = LinearConfig("gemv", 1, 1024, 64)
    monkeypatch.setattr(kernel_linear, "config_for", lambda m, n, k: wide)

    def codes(ops, scaled_mm: bool):
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
            fp8_scaled_mm=scaled_mm,
        )

    assert torch.equal(codes(talker_ops.fused(), True), codes(talker_ops.EAGER, False))


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
    emulated = fp8.Fp8Weight(weight, scaled_mm=False).matmul(x).float()
    quantized = fp8.Fp8Weight(weight, scaled_mm=True)
    quantized.matmul(x)  # cuBLASLt picks its kernel outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = quantized.matmul(x)
    graph.replay()
    torch.cuda.synchronize()
    error = (out.float() - emulated).abs().amax() / emulated.abs().amax()
    assert error < 1e-2, f"relative error {error:.2e}"
