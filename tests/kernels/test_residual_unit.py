"""kernels.residual_unit, a residual unit's two convolutions in one launch, against the two
calls of kernels.conv1d it replaces (the same roundings: its results to the last bit, up
to the order of float32 sums) and against the torch reference, through
speech_tokenizer.rate12.convs over
successive calls (state). Outputs are NaN-poisoned first, so an element the kernel never
writes fails. Runs in Triton's interpreter on a CPU (the whole decoder streamed on it:
tests/codec/test_conv_kernels.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ttsfleet_runtime.kernels import residual_unit, residual_unit_head
from ttsfleet_runtime.kernels.conv1d import ConvConfig, causal_conv1d
from ttsfleet_runtime.speech_tokenizer.rate12 import convs
from ttsfleet_runtime.speech_tokenizer.rate12.convs import ResidualUnit, SnakeBeta

SMALL = ConvConfig(16, 16, 16, num_warps=4, num_stages=1)  # several tiles on every axis


pytestmark = pytest.mark.usefixtures("nan_conv_outputs")


def _rand(g, *shape, dtype=torch.float32, scale=1.0):
    return (scale * torch.randn(*shape, generator=g)).to(dtype)


def _factors(g, channels, dtype):
    """(frequency, inverse_magnitude) of a SnakeBeta with random parameters."""
    frequency, inverse_magnitude = _rand(g, 2, channels, scale=0.5).exp()
    return frequency.to(dtype), inverse_magnitude.to(dtype)


def assert_same_rounding(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal but for float32 sums taken in another order: a handful of elements a rounding
    step apart at most. (A missed rounding of conv1's output or of h moves most elements.)"""
    step = torch.finfo(want.dtype).eps * want.float().abs().clamp_min(1e-3)
    off = got.float() != want.float()
    assert off.float().mean().item() <= 0.01, f"{off.sum()} of {off.numel()} elements differ"
    assert ((got.float() - want.float()).abs() <= 2 * step).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("channels", [16, 24, 40])
@pytest.mark.parametrize("dilation", [1, 3])
@pytest.mark.parametrize(("emit_raw", "length"), [(True, 37), (False, 13)], ids=["both", "act"])
def test_one_launch_gives_the_two_calls_results(dtype, channels, dilation, emit_raw, length):
    g = torch.Generator().manual_seed(channels * 10 + dilation)
    batch, context = 2, 6 * dilation
    x = _rand(g, batch, length, channels, dtype=dtype)
    x_act = _rand(g, batch, length, channels, dtype=dtype)
    # History as strided rows of a wider packed state, as StreamingCodec hands it over.
    packed = _rand(g, batch, context * channels + 5, dtype=dtype)
    history = packed[:, 3 : 3 + context * channels].view(batch, context, channels)
    w1 = _rand(g, 7, channels, channels, dtype=dtype, scale=(7 * channels) ** -0.5)
    w2 = _rand(g, 1, channels, channels, dtype=dtype, scale=channels**-0.5)
    b1, b2 = _rand(g, channels, dtype=dtype), _rand(g, channels, dtype=dtype)
    act2, next_act = _factors(g, channels, dtype), _factors(g, channels, dtype)

    _, h = causal_conv1d(
        x_act, w1, history, dilation=dilation, bias=b1, activation=act2, emit_raw=False
    )
    want_raw, want_act = causal_conv1d(
        h, w2, bias=b2, residual=x, activation=next_act, emit_raw=emit_raw
    )
    raw, act = residual_unit.residual_unit(
        x,
        x_act,
        history,
        w1,
        b1,
        act2,
        w2,
        b2,
        next_act,
        emit_raw=emit_raw,
        dilation=dilation,
        config=SMALL,
    )
    assert act.shape == (batch, length, channels)
    if dtype == torch.float32:
        torch.testing.assert_close(act, want_act, atol=1e-5, rtol=1e-5)
    else:
        assert_same_rounding(act, want_act)
    if emit_raw:
        if dtype == torch.float32:
            torch.testing.assert_close(raw, want_raw, atol=1e-5, rtol=1e-5)
        else:
            assert_same_rounding(raw, want_raw)
    else:
        assert raw is None


def _unit(channels: int, dilation: int, dtype: torch.dtype, seed: int) -> ResidualUnit:
    """A ResidualUnit with random weights and activations (derived layouts in `dtype`)."""
    torch.manual_seed(seed)
    unit = ResidualUnit(channels, dilation)
    with torch.no_grad():
        for act in (unit.act1, unit.act2):
            act.alpha.normal_(0, 0.5)
            act.beta.normal_(0, 0.5)
    unit.conv1.state_key = "ru"
    unit.to(dtype)
    for act in (unit.act1, unit.act2):
        act.derive_factors()
    for layer in (unit.conv1, unit.conv2):
        layer.derive_kernel_layout()
    return unit


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("channels", "dilation"), [(24, 3), (40, 1)])
def test_unit_on_the_triton_route_matches_two_calls_and_eager(
    dtype, channels, dilation, monkeypatch
):
    """ResidualUnit.forward with the Triton route bound runs the one launch; over calls
    shorter and longer than conv1's history it gives the two kernel calls' outputs (and
    in float32 eager's: in bf16 eager rounds after every torch operation) and state."""
    monkeypatch.setattr(residual_unit, "config_for", lambda channels: SMALL)
    launched = []
    real = convs.residual_unit_kernel

    def spy(*args, **kwargs):
        launched.append(args[2].shape[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(convs, "residual_unit_kernel", spy)
    unit = _unit(channels, dilation, dtype, seed=channels)
    follower = SnakeBeta(channels)
    with torch.no_grad():
        follower.alpha.normal_(0, 0.5)
    follower.to(dtype).derive_factors()
    g = torch.Generator().manual_seed(5)
    states = {
        run: {"ru": torch.zeros(2, 6 * dilation, channels, dtype=dtype)}
        for run in ("eager", "two calls", "fused")
    }

    routes = {
        "eager": convs.EAGER,
        "two calls": dataclasses.replace(convs.ROUTES["triton"], fuse_residual_units=False),
        "fused": convs.ROUTES["triton"],
    }

    def run(name: str, x: torch.Tensor, x_act: torch.Tensor, emit_raw: bool):
        return unit(x, x_act, states[name], follower, emit_raw, routes[name])

    for length, emit_raw in ((5, True), (23, False), (2, True)):
        x = _rand(g, 2, length, channels, dtype=dtype)
        x_act = unit.act1(x)
        got = run("fused", x, x_act, emit_raw)
        references = ["two calls", "eager"] if dtype == torch.float32 else ["two calls"]
        for name in references:
            want = run(name, x, x_act, emit_raw)
            for w, o in zip(want, got, strict=True):
                assert (w is None) == (o is None)
                if w is None:
                    continue
                if dtype == torch.float32:
                    torch.testing.assert_close(o, w, atol=1e-5, rtol=1e-5)
                else:
                    assert_same_rounding(o, w)
            torch.testing.assert_close(states["fused"]["ru"], states[name]["ru"], atol=0, rtol=0)
    assert launched == [5, 23, 2]


@pytest.mark.parametrize(
    ("route", "channels", "samples", "fused"),
    [
        ("eager", 96, 15360, False),  # the reference stays two torch convolutions
        ("triton", 96, 15360, True),
        ("triton", 256, 16, True),
        ("triton", 384, 1280, False),  # wider than one tile: two calls
        ("routed", 192, 5120, True),
        ("routed", 192, convs.TRITON_MIN_SAMPLES - 1, False),  # both on the matrix product
        ("gemm", 96, 15360, False),
        ("cudnn", 96, 15360, False),
    ],
)
def test_fusion_only_where_the_route_puts_both_convolutions_on_the_kernel(
    route, channels, samples, fused
):
    assert convs.ROUTES[route].fuses_residual_unit(channels, samples) is fused


def test_fusion_can_be_turned_off():
    two_calls = dataclasses.replace(convs.ROUTES["triton"], fuse_residual_units=False)
    assert not two_calls.fuses_residual_unit(96, 15360)


def test_refuses_units_wider_than_one_tile():
    c = residual_unit.MAX_CHANNELS * 2
    x = torch.zeros(1, 4, c)
    w1, w2, v = torch.zeros(7, c, c), torch.zeros(1, c, c), torch.zeros(c)
    with pytest.raises(ValueError, match="one tile"):
        residual_unit.residual_unit(x, x, torch.zeros(1, 6, c), w1, v, (v, v), w2, v, (v, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(("channels", "length"), [(16, 37), (40, 6), (24, 70)])
def test_unit_with_its_head_gives_the_unit_then_the_head_convolution(dtype, channels, length):
    """residual_unit_head: the last unit and the decoder's head (C -> 1, 7 taps) without
    the unit's output in memory, against residual_unit then causal_conv1d: the waveform
    and the head's next history (act's last 6 rows), over several time tiles."""
    g = torch.Generator().manual_seed(channels + length)
    batch, dilation = 3, 3
    x = _rand(g, batch, length, channels, dtype=dtype)
    x_act = _rand(g, batch, length, channels, dtype=dtype)
    history = _rand(g, batch, 6 * dilation, channels, dtype=dtype)
    w1 = _rand(g, 7, channels, channels, dtype=dtype, scale=(7 * channels) ** -0.5)
    w2 = _rand(g, 1, channels, channels, dtype=dtype, scale=channels**-0.5)
    b1, b2 = _rand(g, channels, dtype=dtype), _rand(g, channels, dtype=dtype)
    act2, next_act = _factors(g, channels, dtype), _factors(g, channels, dtype)
    head_w = _rand(g, 7, channels, 1, dtype=dtype, scale=(7 * channels) ** -0.5)
    head_b = _rand(g, 1, dtype=dtype)
    # The head's history as strided rows of a packed state.
    packed = _rand(g, batch, 6 * channels + 3, dtype=dtype)
    head_history = packed[:, 1 : 1 + 6 * channels].view(batch, 6, channels)
    common = (x, x_act, history, w1, b1, act2, w2, b2, next_act)

    _, act = residual_unit.residual_unit(*common, emit_raw=False, dilation=dilation, config=SMALL)
    want, _ = causal_conv1d(act, head_w, head_history, bias=head_b, config=SMALL)
    got, tail = residual_unit_head.residual_unit_head(
        *common,
        head_w[:, :, 0].t().contiguous(),
        head_b,
        head_history,
        dilation=dilation,
        config=SMALL,
    )
    assert got.shape == (batch, length, 1)
    torch.testing.assert_close(tail, act[:, -6:], atol=0, rtol=0)
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    else:
        assert_same_rounding(got, want)


def test_unit_with_its_head_refuses_fewer_samples_than_the_heads_history():
    c = 16
    x, v = torch.zeros(1, 5, c), torch.zeros(c)
    w1, w2 = torch.zeros(7, c, c), torch.zeros(1, c, c)
    with pytest.raises(ValueError, match="fewer than the head's history"):
        residual_unit_head.residual_unit_head(
            x,
            x,
            torch.zeros(1, 6, c),
            w1,
            v,
            (v, v),
            w2,
            v,
            (v, v),
            torch.zeros(c, 7),
            torch.zeros(1),
            torch.zeros(1, 6, c),
        )
