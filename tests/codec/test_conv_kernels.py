"""The tiny codec decoder with its convolutions on the Triton kernel (kernels/conv1d.py,
in the interpreter on a CPU) gives the eager decoder's audio, streamed in chunks."""

from __future__ import annotations

import torch

from ttsfleet_runtime.codec import convs
from ttsfleet_runtime.codec.streaming import StreamingCodec
from ttsfleet_runtime.kernels import conv1d

# Long time tiles: the interpreter's cost is per program and per loop step, not per element.
INTERPRETER_CONFIG = conv1d.ConvConfig(2048, 16, 32, num_stages=1)


def test_tiny_decoder_on_the_kernels_matches_eager(tiny_decoder, monkeypatch):
    monkeypatch.setattr(conv1d, "config_for", lambda *shape: INTERPRETER_CONFIG)
    codes = torch.randint(0, 2048, (2, 2, 16), generator=torch.Generator().manual_seed(1))
    eager = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    kernel = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    e_slots = [eager.open(), eager.open()]
    k_slots = [kernel.open(), kernel.open()]
    try:
        for chunk in (codes[:, :1], codes[:, 1:]):
            want = eager.decode(e_slots, chunk)
            convs.use("triton")
            got = kernel.decode(k_slots, chunk)
            convs.use_eager()
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    finally:
        convs.use_eager()
