"""The tiny codec decoder with its convolutions on the Triton kernels (kernels/conv1d.py,
each residual unit as one launch of kernels/residual_unit.py; in the interpreter on a
CPU) gives the eager decoder's audio, streamed in chunks, and its own one-pass audio."""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels import conv1d, residual_unit
from ttsfleet_runtime.speech_tokenizer.rate12 import convs
from ttsfleet_runtime.speech_tokenizer.rate12.streaming import StreamingCodec

# Long time tiles: the interpreter's cost is per program and per loop step, not per element.
INTERPRETER_CONFIG = conv1d.ConvConfig(2048, 16, 32, num_stages=1)


@pytest.fixture
def fused_units(monkeypatch) -> list[str]:
    """Interpreter-sized tiles for both kernels; the fused units run: "unit", or "head"
    for the last one with the decoder's head."""
    monkeypatch.setattr(conv1d, "config_for", lambda *shape: INTERPRETER_CONFIG)
    monkeypatch.setattr(residual_unit, "config_for", lambda channels: INTERPRETER_CONFIG)
    launched = []

    def spy(name, real):
        def launch(unit, x, *args, **kwargs):
            launched.append(name)
            return real(unit, x, *args, **kwargs)

        return launch

    monkeypatch.setattr(convs, "residual_unit_kernel", spy("unit", convs.residual_unit_kernel))
    monkeypatch.setattr(
        convs, "residual_unit_head_kernel", spy("head", convs.residual_unit_head_kernel)
    )
    return launched


# The fused launches of one decode call: every unit of the 4 blocks, the last with the head.
ONE_CALL = ["unit"] * 11 + ["head"]


def test_tiny_decoder_on_the_kernels_matches_eager(tiny_decoder, decoder_on, fused_units):
    codes = torch.randint(0, 2048, (2, 2, 16), generator=torch.Generator().manual_seed(1))
    eager = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    kernel = StreamingCodec(decoder_on("triton"), max_streams=2, device="cpu")
    e_slots = [eager.open(), eager.open()]
    k_slots = [kernel.open(), kernel.open()]
    for chunk in (codes[:, :1], codes[:, 1:]):
        want = eager.decode(e_slots, chunk)
        got = kernel.decode(k_slots, chunk)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert fused_units == ONE_CALL * 2


def test_fused_units_streamed_in_chunks_give_the_one_pass_audio(decoder_on, fused_units):
    """Each fused unit carries conv1's history across calls as the two calls do."""
    codes = torch.randint(0, 2048, (1, 3, 16), generator=torch.Generator().manual_seed(2))
    on_kernels = decoder_on("triton")
    whole = StreamingCodec(on_kernels, max_streams=1, device="cpu")
    chunked = StreamingCodec(on_kernels, max_streams=1, device="cpu")
    want = whole.decode([whole.open()], codes)
    slot = chunked.open()
    got = torch.cat([chunked.decode([slot], codes[:, :1]), chunked.decode([slot], codes[:, 1:])], 1)
    assert fused_units == ONE_CALL * 3
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
