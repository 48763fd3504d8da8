"""Our decoder against the official qwen-tts decoder, same random weights, float32."""

from __future__ import annotations

import torch


def test_the_reference_loads_every_tensor_the_writer_wrote(reference_tokenizer):
    # reference_tokenizer loads with strict=True: a missing, extra or misshapen tensor fails.
    assert reference_tokenizer.decoder.config.num_quantizers == 16


def test_waveform_matches_the_reference_decoder(tiny_decoder, reference_tokenizer, random_codes):
    # 24 frames: three times the tiny sliding window (8), so windowing is exercised.
    codes = random_codes(batch=2, frames=24, seed=1)
    with torch.no_grad():
        expected = reference_tokenizer.decoder(codes.transpose(1, 2)).squeeze(1)
    ours = tiny_decoder.decode(codes)
    assert ours.shape == expected.shape == (2, 24 * 1920)
    assert expected.std() > 0.05  # a silent or saturated waveform would prove nothing
    torch.testing.assert_close(ours, expected, atol=2e-4, rtol=1e-3)


def test_waveform_matches_the_reference_tokenizer_decode(
    tiny_decoder, reference_tokenizer, random_codes
):
    # The public entry point: codes [B, T, 16], list of waveforms back.
    codes = random_codes(batch=1, frames=12, seed=2)
    with torch.no_grad():
        (expected,) = reference_tokenizer.decode(codes, return_dict=False)
    ours = tiny_decoder.decode(codes)
    torch.testing.assert_close(ours, expected[0][None], atol=2e-4, rtol=1e-3)
