"""The cuDNN and matrix-product routes of the codec's convolutions (conv2d on
channels-last views; one addmm over the input windows; each with its epilogue) against
the torch reference, layer by layer over successive calls (state) and as the whole tiny
decoder streamed; and the rule that routes each convolution."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ttsfleet_runtime.speech_tokenizer.rate12 import convs
from ttsfleet_runtime.speech_tokenizer.rate12.convs import (
    CausalConv1d,
    CausalTransposeConv1d,
    SnakeBeta,
)
from ttsfleet_runtime.speech_tokenizer.rate12.streaming import StreamingCodec

CIN = 12
LAYERS = {
    "k7-dilated": lambda: CausalConv1d(CIN, 10, kernel_size=7, dilation=3),
    "k1": lambda: CausalConv1d(CIN, 10, kernel_size=1),
    "k3": lambda: CausalConv1d(CIN, 10, kernel_size=3),
    "transposed-x2": lambda: CausalTransposeConv1d(CIN, 6, kernel_size=4, stride=2),
    "transposed-x5": lambda: CausalTransposeConv1d(CIN, 6, kernel_size=10, stride=5),
    "transposed-x2-1tap": lambda: CausalTransposeConv1d(CIN, 6, kernel_size=2, stride=2),
}


def _activation(channels: int, g: torch.Generator) -> SnakeBeta:
    act = SnakeBeta(channels)
    with torch.no_grad():
        act.alpha.copy_(torch.randn(channels, generator=g))
        act.beta.copy_(torch.randn(channels, generator=g))
    act.derive_factors()
    return act


@pytest.mark.parametrize("route", ["cudnn", "gemm"])
@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize(
    ("residual", "with_activation", "emit_raw"),
    [(True, True, True), (True, True, False), (False, True, False), (False, False, True)],
    ids=["res-both", "res-act", "act", "raw"],
)
def test_route_matches_eager_over_calls(route, kind, residual, with_activation, emit_raw):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    layer = LAYERS[kind]()
    cout = layer.conv.out_channels
    activation = _activation(cout, g) if with_activation else None
    eager_state = {layer.state_key: torch.zeros(2, layer.context, CIN)} if layer.context else {}
    route_state = dict(eager_state)
    # Shorter than the dilated history, then longer: both ways of remembering it.
    for length in (4, 23, 1):
        x = torch.randn(2, length, CIN, generator=g)
        res = torch.randn(2, length * layer.upsampling, cout, generator=g) if residual else None
        kwargs = dict(residual=res, activation=activation, emit_raw=emit_raw)
        want = convs.conv_eager(layer, x, eager_state, **kwargs)
        got = convs.ROUTES[route].conv(layer, x, route_state, **kwargs)
        for w, o in zip(want, got, strict=True):
            assert (w is None) == (o is None)
            if w is not None:
                assert o.shape == w.shape
                torch.testing.assert_close(o, w, atol=1e-5, rtol=1e-5)
        if layer.context:
            torch.testing.assert_close(route_state[layer.state_key], eager_state[layer.state_key])


@pytest.mark.parametrize("kind", ["k7-dilated", "transposed-x5"])
def test_cudnn_output_stays_channels_last(kind, monkeypatch):
    """conv2d's output on channels-last views is [B, 1, T, N] in memory, so the route's
    [B, T * s, Cout] result is that very buffer (no copy)."""
    layer = LAYERS[kind]()
    state = {layer.state_key: torch.zeros(3, layer.context, CIN)} if layer.context else {}
    seen = []
    conv2d = F.conv2d

    def recording(x, weight, *args, **kwargs):
        assert x.is_contiguous(memory_format=torch.channels_last)
        assert weight.is_contiguous(memory_format=torch.channels_last)
        seen.append(conv2d(x, weight, *args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(F, "conv2d", recording)
    raw, _ = convs.conv_cudnn(layer, torch.randn(3, 9, CIN), state)
    (y,) = seen
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert raw.data_ptr() == y.data_ptr() and raw.is_contiguous()
    assert raw.shape == (3, 9 * layer.upsampling, layer.conv.out_channels)


def test_route_for_gives_the_triton_kernel_the_convolutions_of_many_samples_a_stream():
    samples = convs.TRITON_MIN_SAMPLES
    assert convs.route_for(samples) == "triton"  # the last blocks, at every batch size
    assert convs.route_for(samples * 60) == "triton"  # the output convolution at 8 frames
    assert convs.route_for(samples - 1) == "gemm"  # its per-stream tiles are mostly masked
    assert convs.route_for(1) == "gemm"  # the pre-transformer side at one frame


def test_routed_runs_the_chosen_route_and_matches_eager(monkeypatch):
    """Few samples a stream go to the matrix product, many to the Triton kernel (here in
    Triton's interpreter); the stream continues exactly across the switch."""
    monkeypatch.setattr(convs, "TRITON_MIN_SAMPLES", 16)
    ran = []
    for name in ("conv_gemm", "conv_kernel"):
        real = getattr(convs, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            ran.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(convs, name, spy)
    g = torch.Generator().manual_seed(3)
    layer = LAYERS["k7-dilated"]()
    activation = _activation(layer.conv.out_channels, g)
    eager_state = {layer.state_key: torch.zeros(2, layer.context, CIN)}
    routed_state = dict(eager_state)
    for length in (4, 23, 7):
        x = torch.randn(2, length, CIN, generator=g)
        want = convs.conv_eager(layer, x, eager_state, activation=activation)
        got = convs.conv_routed(layer, x, routed_state, activation=activation)
        for w, o in zip(want, got, strict=True):
            torch.testing.assert_close(o, w, atol=1e-5, rtol=1e-5)
    assert ran == ["conv_gemm", "conv_kernel", "conv_gemm"]


def test_gemm_route_reads_one_tap_inputs_without_a_copy(monkeypatch):
    """A 1x1 convolution's windows are its input rows: the product reads x itself."""
    layer = LAYERS["k1"]()
    x = torch.randn(3, 5, CIN)
    seen = []
    addmm = torch.addmm

    def recording(bias, windows, weight):
        seen.append(windows)
        return addmm(bias, windows, weight)

    monkeypatch.setattr(torch, "addmm", recording)
    convs.conv_gemm(layer, x, {})
    (windows,) = seen
    assert windows.data_ptr() == x.data_ptr() and windows.shape == (15, CIN)


@pytest.mark.parametrize("route", ["cudnn", "gemm", "routed"])
def test_tiny_decoder_streamed_on_a_route_matches_eager(
    tiny_decoder, decoder_on, random_codes, route
):
    codes = random_codes(2, 3, seed=1)
    eager = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    routed = StreamingCodec(decoder_on(route), max_streams=2, device="cpu")
    e_slots = [eager.open(), eager.open()]
    r_slots = [routed.open(), routed.open()]
    for chunk in (codes[:, :1], codes[:, 1:]):
        want = eager.decode(e_slots, chunk)
        got = routed.decode(r_slots, chunk)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_a_decoder_on_the_kernels_leaves_another_on_torch(
    tiny_decoder, decoder_on, random_codes, monkeypatch
):
    """Routes belong to a decoder: making one on the Triton kernels (convolutions and
    attention) changes nothing of a decoder beside it, whose decode runs no kernel."""
    from ttsfleet_runtime.kernels import conv1d
    from ttsfleet_runtime.speech_tokenizer.rate12 import transformer

    ran = []

    def refuse(name):
        def kernel(*args, **kwargs):
            ran.append(name)
            raise AssertionError(f"{name} ran for the eager decoder")

        return kernel

    monkeypatch.setattr(conv1d, "causal_conv1d", refuse("causal_conv1d"))
    monkeypatch.setattr(conv1d, "depthwise_causal_conv1d", refuse("depthwise_causal_conv1d"))
    monkeypatch.setattr(convs, "residual_unit_kernel", refuse("residual_unit_kernel"))
    monkeypatch.setitem(transformer._ATTENTION, "kernel", refuse("window_attention"))
    on_kernels = decoder_on("triton", attention="kernel")
    assert on_kernels.route is convs.ROUTES["triton"]
    assert tiny_decoder.route is convs.EAGER
    codec = StreamingCodec(tiny_decoder, max_streams=1, device="cpu")
    codec.decode([codec.open()], random_codes(1, 2, seed=4))
    assert ran == []
