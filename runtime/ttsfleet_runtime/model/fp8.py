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
finite value); the activation gets one scale per row (per token) at every call, computed
on the device (no host sync, no data-dependent shape: capturable in a CUDA graph). The
product is `(x_q @ W_q^T) * s_x * s_w`, accumulated in float32, rounded once to the
activation's dtype. Two ways to run it, the same numbers:

- `torch._scaled_mm` (CUDA compute capability 8.9+: Ada, Hopper; torch 2.15 runs it on
  the CPU too, which the tests use to compare the two);
- the emulation: the fp8 values widened to float32 and multiplied there (products of two
  e4m3 values are exact in float32; only the order of the sums differs). Used on the CPU,
  where tests check the same numbers the GPU computes. A GPU without fp8 tensor cores is
  refused at start (`check_device`): the emulation there would be slower than bf16 and
  its float32 copy of a weight per call would cost more memory than it saves.
"""

from __future__ import annotations

import torch
from torch import nn

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
    of a bf16 matrix: the layers pass it to `ops.linear` as they pass a tensor, and
    `matmul` is the product. `scaled_mm`: run it with torch._scaled_mm, else emulated."""

    def __init__(self, weight: torch.Tensor, scaled_mm: bool):
        super().__init__()
        codes, scale = quantize_rows(weight)
        self.register_buffer("codes", codes.contiguous())
        # [1, N]: the shape _scaled_mm takes for per-column scales of its second operand.
        self.register_buffer("scale", scale.reshape(1, -1).contiguous())
        self.scaled_mm = scaled_mm

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
        """x [..., K] @ W^T -> [..., N] in x's dtype: x quantized per row, the product of
        the codes accumulated in float32, times both scales, rounded once."""
        lead, k = x.shape[:-1], x.shape[-1]
        y = self.product(*quantize_rows(x.reshape(-1, k)), x.dtype)
        return y.reshape(*lead, -1)

    def product(self, x_codes: torch.Tensor, x_scale: torch.Tensor, dtype) -> torch.Tensor:
        """The product of quantized rows (codes [M, K], scales [M, 1]) with W^T -> [M, N]
        in `dtype`; the fused operations quantize x in one kernel (kernels/fp8_quantize.py)."""
        if self.scaled_mm:
            # codes^T is a column-major view: the layout _scaled_mm wants for its second operand.
            return torch._scaled_mm(
                x_codes, self.codes.t(), scale_a=x_scale, scale_b=self.scale, out_dtype=dtype
            )
        return ((x_codes.float() @ self.codes.float().t()) * x_scale * self.scale).to(dtype)


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


def uses_scaled_mm(device: str) -> bool:
    """The product's way on `device` (see the module docstring): _scaled_mm on a GPU
    (check_device has refused one without fp8), the emulation elsewhere."""
    return torch.device(device).type == "cuda"


@torch.no_grad()
def quantize_stack(stack: nn.Module, scaled_mm: bool) -> None:
    """Each decoder layer's QUANTIZED_MATRICES become Fp8Weights, the bf16 parameter
    dropped (freed once nothing else holds it): only the fp8 copy stays in memory."""
    for layer in stack.layers:
        for name in QUANTIZED_MATRICES:
            weight = getattr(layer, name)
            delattr(layer, name)  # a Parameter slot cannot take a module: free the name
            setattr(layer, name, Fp8Weight(weight, scaled_mm))
            del weight
