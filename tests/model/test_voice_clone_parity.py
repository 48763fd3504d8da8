"""Base checkpoints clone a voice with qwen-tts' prompt (`generate_voice_clone`): our
prompt and greedy codes against the reference's on the same random weights, float32
CPU, with the reference's own speaker embedding and reference codes as the voice.

Both modes: x-vector only (the embedding in the speaker's place) and in context (the
transcript and the recording's frames before the text), the latter with a text
longer than the prompt's text positions (the rest follows frame by frame) and one
shorter (padded with tts_pad)."""

from __future__ import annotations

import pytest
import torch

from support.greedy import our_codes
from support.reference_model import reference_cloned_voice, reference_model
from ttsfleet_runtime.model.prompt import PromptBuilder
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer
from ttsfleet_runtime.model.weights import load_model

LONG_TEXT = "Hello world, this is a parity test of a cloned voice speaking a longer sentence."
SHORT_TEXT = "Hi there."
TRANSCRIPT = "A short reference."
FRAMES = 12

# (text, seconds of reference recording, transcript): None = x-vector only.
CASES = {
    "x-vector": (LONG_TEXT, 1.0, None),
    "in-context, text beyond the prompt": (LONG_TEXT, 1.0, TRANSCRIPT),
    "in-context, text within the prompt": (SHORT_TEXT, 2.0, TRANSCRIPT),
}


class _Captured(Exception):
    """Raised by the stand-in for the reference talker's generate: its inputs are
    all these tests need."""


def _reference_generate(checkpoint, text, cloned, language, **kwargs):
    """The reference's `Qwen3TTSForConditionalGeneration.generate` as
    `generate_voice_clone` calls it for one voice clone prompt."""
    ref = reference_model(checkpoint)
    tok = TextTokenizer.from_checkpoint(checkpoint)
    ids = torch.tensor(
        [tok.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")]
    )
    in_context = cloned.ref_codes is not None
    ref_ids = None
    if in_context:
        ref_ids = [
            torch.tensor([tok.encode(f"<|im_start|>assistant\n{cloned.ref_text}<|im_end|>\n")])
        ]
    prompt = dict(
        ref_code=[torch.from_numpy(cloned.ref_codes)] if in_context else None,
        ref_spk_embedding=[torch.from_numpy(cloned.speaker_embedding)],
        x_vector_only_mode=[not in_context],
        icl_mode=[in_context],
    )
    with torch.no_grad():
        return ref.generate(
            input_ids=[ids],
            ref_ids=ref_ids,
            voice_clone_prompt=prompt,
            languages=[language],
            non_streaming_mode=False,
            **kwargs,
        )


def _reference_prompt(checkpoint, text, cloned, language):
    """-> (the reference talker's prefill input [T, hidden], its trailing text [N, hidden])."""
    ref = reference_model(checkpoint)
    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        raise _Captured

    ref.talker.generate = capture
    try:
        _reference_generate(checkpoint, text, cloned, language)
    except _Captured:
        pass
    finally:
        del ref.talker.generate
    return seen["inputs_embeds"][0], seen["trailing_text_hidden"][0]


@pytest.mark.parametrize("case", CASES)
def test_prompt_embeddings_match_the_reference(tiny_base, case):
    text, seconds, transcript = CASES[case]
    cloned = reference_cloned_voice(tiny_base, seconds, transcript)
    expected_prompt, expected_trailing = _reference_prompt(tiny_base, text, cloned, "english")

    model = load_model(tiny_base, "cpu", "float32", max_positions=256)
    builder = PromptBuilder(model.config, TextTokenizer.from_checkpoint(tiny_base), tiny_base.name)
    voice = builder.voice(None, None, "english", cloned)
    stream = builder.text_stream(voice, builder.text_ids(text), closed=True)
    taken = voice.prompt_text_ids
    prompt = builder.prefill_embeds(model, voice, stream[:taken])
    assert prompt.shape[0] == builder.prompt_length(voice)
    torch.testing.assert_close(prompt, expected_prompt, rtol=1e-5, atol=1e-6)
    # What each decode step adds after the prompt: the rest of the text stream, then
    # tts_pad (the reference pads its trailing text with tts_pad).
    pad = builder.config.tts_pad_token_id
    rest = stream[taken:]
    rest = rest + [pad] * (expected_trailing.shape[0] - len(rest))
    trailing = model.talker.text_hidden(torch.tensor(rest))
    torch.testing.assert_close(trailing, expected_trailing, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_greedy_codes_match_the_reference(tiny_base, case):
    text, seconds, transcript = CASES[case]
    cloned = reference_cloned_voice(tiny_base, seconds, transcript)
    # The reference completes frame t while generating first code t+1: ask for
    # one more first code to get FRAMES whole frames.
    expected, _ = _reference_generate(
        tiny_base,
        text,
        cloned,
        "english",
        max_new_tokens=FRAMES + 1,
        do_sample=False,
        subtalker_dosample=False,
        repetition_penalty=1.05,
    )
    got = our_codes(tiny_base, text, None, None, "english", FRAMES, cloned=cloned)
    assert got.shape == expected[0].shape
    assert torch.equal(got, expected[0])
