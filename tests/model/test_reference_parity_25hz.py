"""The 25 Hz talker (`num_code_groups` 1) against the official qwen-tts generate loop
on the same random weights (float32, CPU): prompt, prefill and every decode step.

qwen-tts 0.1.1's talker asks its code predictor for `num_code_groups - 1` = 0 new codes
each step, which transformers' `generate` refuses (`max_new_tokens` must be > 0). That
call alone is replaced here by what it would mean: no sub-codes (an empty sequence).
Everything else runs as published: the prompt, the prefill, the per-step input (the
code's embedding plus the next text token), repetition penalty, suppressed control ids
and the stop rule. In-context cloning cannot be compared: the reference's
`generate_icl_prompt` indexes reference codes as [T, groups] and fails on 25 Hz [T]."""

from __future__ import annotations

import types

import pytest
import torch

from support.greedy import our_codes
from support.reference_model import reference_greedy_codes, reference_model

TEXT = "Hello world, this is a parity test."
FRAMES = 12


def _reference_codes(checkpoint, speaker: str, language: str) -> torch.Tensor:
    def no_sub_codes(inputs_embeds, **_):
        return types.SimpleNamespace(
            sequences=torch.zeros(inputs_embeds.shape[0], 0, dtype=torch.long)
        )

    reference_model(checkpoint).talker.code_predictor.generate = no_sub_codes
    return reference_greedy_codes(checkpoint, TEXT, speaker, None, language, FRAMES)


@pytest.mark.parametrize(("speaker", "language"), [("ryan", "english"), ("eric", "auto")])
def test_greedy_codes_match_the_reference_generate_loop(tiny_25hz_custom_voice, speaker, language):
    expected = _reference_codes(tiny_25hz_custom_voice, speaker, language)
    got = our_codes(tiny_25hz_custom_voice, TEXT, speaker, None, language, FRAMES)
    assert expected.shape == (FRAMES, 1)
    assert torch.equal(got, expected)
