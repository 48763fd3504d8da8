"""kernels.conv1d against torch convolutions: history from the state, dilation, bias,
residual, SnakeBeta in the epilogue (raw, activated or both), transposed convolutions as
2-tap convolutions, sizes that are not multiples of the blocks (the whole decoder on the
kernel: tests/codec/test_conv_kernels.py). Outputs are NaN-poisoned first, so an
element the kernel never writes fails. Runs in Triton's interpreter on a CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ttsfleet_runtime.kernels.conv1d import ConvConfig, causal_conv1d, default_config
from ttsfleet_runtime.speech_tokenizer.rate12 import convs
from ttsfleet_runtime.speech_tokenizer.rate12.convs import (
    CausalConv1d,
    CausalTransposeConv1d,
    SnakeBeta,
)

SMALL = ConvConfig(16, 16, 16, num_warps=4, num_stages=1)  # several tiles on every axis
CIN, COUT = 20, 24  # not multiples of the blocks
# bf16 under the interpreter truncates instead of rounding (see test_linear.py).
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


pytestmark = pytest.mark.usefixtures("nan_conv_outputs")


def _rand(g, *shape, dtype=torch.float32, scale=1.0):
    return (scale * torch.randn(*shape, generator=g)).to(dtype)


def _snake(frequency, inverse_magnitude, y):
    return y + inverse_magnitude * torch.sin(y * frequency) ** 2


def _reference(x, weight_oik, history, dilation, bias, residual):
    """float64 conv of cat(history, x) with a torch [Cout, Cin, k] weight, + residual."""
    full = x if history is None else torch.cat([history, x], dim=1)
    y = F.conv1d(
        full.double().transpose(1, 2),
        weight_oik.double(),
        None if bias is None else bias.double(),
        dilation=dilation,
    ).transpose(1, 2)
    return y if residual is None else y + residual.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(
    ("taps", "dilation", "length"),
    [(7, 3, 37), (7, 3, 5), (3, 1, 18), (1, 1, 17)],
    ids=["k7d3", "k7d3-shorter-than-history", "k3", "k1"],
)
@pytest.mark.parametrize(
    ("bias", "residual", "emit"),
    [(True, True, "both"), (False, False, "raw"), (True, False, "act")],
)
def test_matches_torch_conv1d(dtype, taps, dilation, length, bias, residual, emit):
    g = torch.Generator().manual_seed(taps * 100 + length)
    batch, context = 2, (taps - 1) * dilation
    x = _rand(g, batch, length, CIN, dtype=dtype)
    weight = _rand(g, COUT, CIN, taps, dtype=dtype, scale=CIN**-0.5)
    # History as strided rows of a wider packed state, as StreamingCodec hands it over.
    packed = _rand(g, batch, context * CIN + 5, dtype=dtype)
    history = packed[:, 3 : 3 + context * CIN].view(batch, context, CIN) if context else None
    b = _rand(g, COUT, dtype=dtype) if bias else None
    res = _rand(g, batch, length, COUT, dtype=dtype) if residual else None
    act = SnakeBeta(COUT)
    act.alpha.data = _rand(g, COUT, scale=0.5)
    act.beta.data = _rand(g, COUT, scale=0.5)
    act.derive_factors()
    act.to(dtype)

    def run(activated: bool, emit_raw: bool):
        return causal_conv1d(
            x,
            weight.permute(2, 1, 0).contiguous(),
            history,
            dilation=dilation,
            bias=b,
            residual=res,
            activation=(act.frequency, act.inverse_magnitude) if activated else None,
            emit_raw=emit_raw,
            config=SMALL,
        )

    raw_out, act_out = run(emit != "raw", emit != "act")
    expected = _reference(x, weight, history, dilation, b, res)
    tol = TOLERANCE[dtype]
    if emit == "act":
        assert raw_out is None
        raw_out, _ = run(False, True)
    torch.testing.assert_close(raw_out.double(), expected, atol=tol, rtol=tol)
    if emit == "raw":
        assert act_out is None
    else:
        # Activated from the stored (rounded) output, as the eager path activates the
        # tensor it stored (the snake's slope turns one bf16 step of y into several).
        want = _snake(act.frequency.double(), act.inverse_magnitude.double(), raw_out.double())
        torch.testing.assert_close(act_out.double(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize(("kernel", "stride"), [(10, 5), (2, 2)], ids=["2-tap", "1-tap"])
def test_transposed_conv_on_the_kernel_matches_torch(kernel, stride):
    """CausalTransposeConv1d's derived 2-tap layout, with history, twice in a row."""
    torch.manual_seed(kernel)
    layer = CausalTransposeConv1d(CIN, 12, kernel, stride).double().float()
    layer.derive_kernel_layout()
    layer.state_key = "up"
    x1, x2 = torch.randn(2, 3, CIN), torch.randn(2, 4, CIN)
    eager_state = {"up": torch.zeros(2, layer.context, CIN)} if layer.context else {}
    kernel_state = dict(eager_state)
    for x in (x1, x2):
        want, _ = convs.conv_eager(layer, x, eager_state)
        got, _ = convs.conv_kernel(layer, x, kernel_state)
        assert got.shape == (2, x.shape[1] * stride, 12)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    if layer.context:
        torch.testing.assert_close(kernel_state["up"], eager_state["up"])


def test_dilated_conv_state_after_short_and_long_inputs():
    """The remembered history is the input's tail, whichever is longer."""
    torch.manual_seed(0)
    layer = CausalConv1d(CIN, COUT, kernel_size=7, dilation=3)
    layer.state_key = "c"
    eager_state = {"c": torch.zeros(1, 18, CIN)}
    kernel_state = dict(eager_state)
    for length in (5, 30, 2):
        x = torch.randn(1, length, CIN)
        want, _ = convs.conv_eager(layer, x, eager_state)
        got, _ = convs.conv_kernel(layer, x, kernel_state)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(kernel_state["c"], eager_state["c"])


def test_default_config_fits_every_layer_width():
    assert default_config(1, 96).block_n == 16
    assert default_config(2304, 1536) == ConvConfig(128, 128, 64, num_warps=8)
    with pytest.raises(ValueError, match="power of two"):
        ConvConfig(96, 32, 32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("dilation", "length"), [(1, 5), (1, 37), (2, 3)])
def test_depthwise_matches_torch_grouped_conv(dtype, dilation, length):
    """depthwise_causal_conv1d: one launch, the history read in place (strided rows of a
    packed state), against torch's grouped convolution of cat(history, x); several tiles
    of samples and channels (300 channels, a partial channel tile)."""
    from ttsfleet_runtime.kernels.conv1d import depthwise_causal_conv1d

    g = torch.Generator().manual_seed(length + dilation)
    batch, channels, taps = 2, 300, 7
    context = (taps - 1) * dilation
    x = _rand(g, batch, length, channels, dtype=dtype)
    packed = _rand(g, batch, context * channels + 7, dtype=dtype)
    history = packed[:, 7:].view(batch, context, channels)
    weight = _rand(g, channels, 1, taps, dtype=dtype, scale=0.4)
    bias = _rand(g, channels, dtype=dtype)

    got = depthwise_causal_conv1d(
        x, weight.permute(2, 1, 0)[:, 0].contiguous(), history, bias=bias, dilation=dilation
    )
    full = torch.cat([history, x], dim=1).double().transpose(1, 2)
    want = F.conv1d(full, weight.double(), bias.double(), dilation=dilation, groups=channels)
    torch.testing.assert_close(
        got.double(), want.transpose(1, 2), atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype]
    )


def test_convnext_depthwise_on_a_kernel_route_matches_eager_over_calls():
    """ConvNeXtBlock's depthwise convolution on a kernel route
    (speech_tokenizer.rate12.convs.ConvRoute.depthwise) gives
    eager's output and state across calls shorter and longer than its history."""
    torch.manual_seed(3)
    layer = CausalConv1d(24, 24, kernel_size=7, groups=24)
    layer.state_key = "dw"
    history = torch.randn(2, 6, 24)
    states = {route: {"dw": history.clone()} for route in ("eager", "triton")}
    for length in (4, 11):
        x = torch.randn(2, length, 24)
        outputs = {}
        for route in states:
            outputs[route] = convs.ROUTES[route].depthwise(layer, x, states[route])
        torch.testing.assert_close(outputs["triton"], outputs["eager"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(states["triton"]["dw"], states["eager"]["dw"])
