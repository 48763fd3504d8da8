"""fp8 (e4m3) weights for the decoder stacks' matrix products (`--weights fp8`).

A decode step at batch 1 reads every weight once per talker step and once per predictor
pass: 5.2 GB a frame at 1.7B in bf16, so halving the bytes of the big matrices halves the
floor of the step. What is quantized, at load, from the bf16 checkpoint (no new format):

- the talker's and the code predictor's decoder layers: fused QKV, O, fused gate-up,
  down (~98% of the bytes a frame reads);
- kept bf16: the embeddings (lookups: a row each, never a matrix product), the heads
  (`codec_head`, the predictor's 15 `lm_head`s: they make the logits that sampling reads
  directly, ~1.5% of the bytes), the text projection and the predictor's input
  projection (once per text token / frame, small), every norm weight (vectors fused into
  the products' prologues), and the codec.

How: one float32 scale per output channel (row of W [N, K]), amax / 448 (e4m3's largest
finite value). The product is weight-only fp8 (W8A16): `x @ (codes * scale)^T`, the
activation never quantized. On a GPU the fused operations (model/ops.py) run it in
kernels/linear.py's Triton kernel, the same kernel and fusions (input norm, SiLU gate,
bias, residual) as bf16 weights: the weight tile is read as e4m3 codes (half the bytes),
widened exactly to bf16 in registers, multiplied on the CUDA or tensor cores with float32
sums, and scaled per column in the epilogue, rounded once. `matmul` is the same product
in torch (float32, one rounding), the eager operations' and the tests' reference.

torch._scaled_mm (both operands fp8, the input quantized per row by
kernels/fp8_quantize.py: W8A8) is the other way, kept for the batch sizes where an H200
run measured it faster than the kernel: from the batch bucket of 8 rows (5 rows and more),
prefill included (kernels/linear_table.py `FP8_SCALED_MM_FROM`); `product` runs it, and
`matmul` follows the same rule. So a decode step of 1-4 rows computes the weight-only
product and a larger one the W8A8 product, whose input rounding adds its own error
(docs/fp8-weights.md). It needs compute capability 8.9+ (Ada, Hopper), which
`check_device` asks of every fp8 run: the kernel's e4m3 loads are measured only there.
The first version ran every product that way and stepped slower than bf16 (docs/fp8-weights.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..kernels import linear_table

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
# A row of zeros gets this scale instead of 0 (its codes are then 0, not NaN).
MIN_SCALE = 1e-12
WEIGHTS = ("bf16", "fp8")
# The decoder layer's matrices that fp8 replaces (model/layers.py DecoderLayer).
QUANTIZED_MATRICES = ("qkv", "o", "gate_up", "down")
# torch._scaled_mm's fp8 GEMMs on CUDA: Ada (8.9) and Hopper (9.0) and newer.
MIN_CAPABILITY = (8, 9)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 codes [M, K], float32 scales [M, 1]): x ~ codes * scales, each
    row scaled so that its largest magnitude maps to 448. Weights (a row per output
    channel) and activations (a row per token) are quantized by this one function."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    codes = (xf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return codes, scale


class Fp8Weight(nn.Module):
    """A [N, K] weight as e4m3 codes and one float32 scale per output channel, in place
    of a bf16 matrix: the layers pass it to `ops.linear` as they pass a tensor."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        codes, scale = quantize_rows(weight)
        self.register_buffer("codes", codes.contiguous())
        # [1, N]: the shape _scaled_mm takes for per-column scales of its second operand
        # (the kernel reads the same N floats).
        self.register_buffer("scale", scale.reshape(1, -1).contiguous())

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes

    def dequantized(self) -> torch.Tensor:
        """The weight the codes stand for, float32 [N, K] (tests, the drift benchmark)."""
        return self.codes.float() * self.scale.reshape(-1, 1)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., K] @ W^T -> [..., N] in x's dtype, the product the fused operations
        run for that many rows (linear_table.fp8_scaled_mm_wins), so the eager path and
        the CPU compute what the GPU does: weight-only as the kernel computes it (the
        codes times x in float32, times the scale, rounded once; a float32 copy of the
        codes a call: a reference, not a serving path), or `product` of the rows
        quantized."""
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        if linear_table.fp8_scaled_mm_wins(x2.shape[0], *self.shape):
            y = self.product(*quantize_rows(x2), x.dtype)
        else:
            y = (F.linear(x2.float(), self.codes.float()) * self.scale).to(x.dtype)
        return y.reshape(*lead, -1)

    def product(self, x_codes: torch.Tensor, x_scale: torch.Tensor, dtype) -> torch.Tensor:
        """torch._scaled_mm of quantized rows (codes [M, K], scales [M, 1], from
        kernels/fp8_quantize.py) with W^T -> [M, N] in `dtype`: the W8A8 way, where
        linear_table.FP8_SCALED_MM_FROM says it is faster."""
        # codes^T is a column-major view: the layout _scaled_mm wants for its second operand.
        return torch._scaled_mm(
            x_codes, self.codes.t(), scale_a=x_scale, scale_b=self.scale, out_dtype=dtype
        )


def check_device(device: str, dtype: torch.dtype) -> None:
    """Refuse fp8 weights where they cannot run as they should: a GPU older than
    compute capability 8.9, or a GPU run whose activations are not bf16 (the fp8 GEMMs'
    output type); the message names the fix."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return
    capability = torch.cuda.get_device_capability(dev)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(dev)
        raise ValueError(
            f"--weights fp8 needs a GPU of compute capability 8.9 or newer (L4, L40S, H100, "
            f"H200), but {name} is {capability[0]}.{capability[1]}: serve it with --weights bf16"
        )
    if dtype != torch.bfloat16:
        raise ValueError(
            f"--weights fp8 on a GPU computes in bfloat16, not {dtype}: drop --dtype or set "
            "--dtype bfloat16"
        )


@torch.no_grad()
def quantize_stack(stack: nn.Module) -> None:
    """Each decoder layer's QUANTIZED_MATRICES become Fp8Weights, the bf16 parameter
    dropped (freed once nothing else holds it): only the fp8 copy stays in memory."""
    for layer in stack.layers:
        for name in QUANTIZED_MATRICES:
            weight = getattr(layer, name)
            delattr(layer, name)  # a Parameter slot cannot take a module: free the name
            setattr(layer, name, Fp8Weight(weight))
            del weight
