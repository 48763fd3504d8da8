"""PromptBuilder.prefill_embeds reads a one-id lead (every voice without a reference)
as its row of the text embedding table instead of copying the id to the device: the
prompt is the same, bit for bit, as the embedding lookup's."""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.model.prompt import PromptBuilder
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer
from ttsfleet_runtime.model.weights import load_model
from ttsfleet_runtime.transfers import ids_on


@pytest.fixture(scope="module")
def built(tiny_custom_voice):
    model = load_model(tiny_custom_voice, "cpu", "float32", max_positions=64)
    return model, PromptBuilder(model.config, TextTokenizer.from_checkpoint(tiny_custom_voice))


def looked_up(builder: PromptBuilder, model, voice, first_id: int) -> torch.Tensor:
    """The prompt as the embedding lookup makes it."""
    head, after_bos = builder._voice_part(model, voice)
    text = model.talker.text_hidden(ids_on([first_id], "cpu"))
    return torch.cat([head, text + after_bos])


@pytest.mark.parametrize(
    "voice", [("ryan", None, "english"), ("vivian", "Cheerful and quick.", "chinese")]
)
def test_a_one_id_lead_makes_the_prompt_of_the_embedding_lookup(built, voice):
    model, builder = built
    prompt_voice = builder.voice(*voice)
    vocab = model.talker.text_embedding.shape[0]
    for first_id in [*builder.text_ids("Hello there."), 0, vocab - 1]:
        embeds = builder.prefill_embeds(model, prompt_voice, [first_id])
        assert torch.equal(embeds, looked_up(builder, model, prompt_voice, first_id))
        assert embeds.shape[0] == builder.prompt_length(prompt_voice)


def test_a_text_id_outside_the_table_is_refused(built):
    model, builder = built
    voice = builder.voice("ryan", None, "english")
    for bad in (-1, model.talker.text_embedding.shape[0]):
        with pytest.raises(IndexError, match="out of range"):
            builder.prefill_embeds(model, voice, [bad])
