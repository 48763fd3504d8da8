"""The cuDNN route of the codec's convolutions (conv2d on channels-last views, epilogue
after it) against the torch reference, layer by layer over successive calls (state) and
as the whole tiny decoder streamed; and the rule that routes each convolution."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ttsfleet_runtime.codec import convs
from ttsfleet_runtime.codec.convs import CausalConv1d, CausalTransposeConv1d, SnakeBeta
from ttsfleet_runtime.codec.streaming import StreamingCodec

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


@pytest.mark.parametrize("kind", list(LAYERS))
@pytest.mark.parametrize(
    ("residual", "with_activation", "emit_raw"),
    [(True, True, True), (True, True, False), (False, True, False), (False, False, True)],
    ids=["res-both", "res-act", "act", "raw"],
)
def test_cudnn_route_matches_eager_over_calls(kind, residual, with_activation, emit_raw):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    layer = LAYERS[kind]()
    cout = layer.conv.out_channels
    activation = _activation(cout, g) if with_activation else None
    eager_state = {layer.state_key: torch.zeros(2, layer.context, CIN)} if layer.context else {}
    cudnn_state = dict(eager_state)
    # Shorter than the dilated history, then longer: both ways of remembering it.
    for length in (4, 23, 1):
        x = torch.randn(2, length, CIN, generator=g)
        res = torch.randn(2, length * layer.upsampling, cout, generator=g) if residual else None
        kwargs = dict(residual=res, activation=activation, emit_raw=emit_raw)
        want = convs.conv_eager(layer, x, eager_state, **kwargs)
        got = convs.conv_cudnn(layer, x, cudnn_state, **kwargs)
        for w, o in zip(want, got, strict=True):
            assert (w is None) == (o is None)
            if w is not None:
                assert o.shape == w.shape
                torch.testing.assert_close(o, w, atol=1e-5, rtol=1e-5)
        if layer.context:
            torch.testing.assert_close(cudnn_state[layer.state_key], eager_state[layer.state_key])


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


def test_route_for_follows_the_table(monkeypatch):
    layer = CausalConv1d(CIN, 10, kernel_size=7)
    assert convs.route_for(layer, 1) == "cudnn"  # not listed: cuDNN
    monkeypatch.setitem(convs.TRITON_MAX_ROWS, (10, CIN, 7), 64)
    assert convs.route_for(layer, 64) == "triton"
    assert convs.route_for(layer, 65) == "cudnn"


@pytest.mark.parametrize("route", ["cudnn", "routed"])
def test_tiny_decoder_streamed_on_a_route_matches_eager(tiny_decoder, random_codes, route):
    codes = random_codes(2, 3, seed=1)
    eager = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    routed = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    e_slots = [eager.open(), eager.open()]
    r_slots = [routed.open(), routed.open()]
    try:
        for chunk in (codes[:, :1], codes[:, 1:]):
            want = eager.decode(e_slots, chunk)
            convs.use(route)
            got = routed.decode(r_slots, chunk)
            convs.use_eager()
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    finally:
        convs.use_eager()
