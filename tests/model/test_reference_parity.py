"""Our talker and code predictor against the official qwen-tts modules on the
same random weights (float32, CPU)."""

from __future__ import annotations

import json

import torch

from support.greedy import our_codes
from support.reference_model import reference_greedy_codes, reference_model
from ttsfleet_runtime.model.prompt import PromptBuilder
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer
from ttsfleet_runtime.model.weights import load_model

TEXT = "Hello world, this is a parity test."
FRAMES = 12


def test_talker_logits_match_reference_on_the_same_prompt(tiny_custom_voice):
    ref = reference_model(tiny_custom_voice)
    ours = load_model(tiny_custom_voice, "cpu", "float32", max_positions=256)
    builder = PromptBuilder(ours.config, TextTokenizer.from_checkpoint(tiny_custom_voice))
    ids = builder.text_ids(TEXT)
    embeds = builder.prefill_embeds(ours, builder.voice("ryan", None, "english"), ids[:1])
    T = embeds.shape[0]
    layers = ours.config.talker.num_hidden_layers
    c = ours.config.talker
    k = torch.zeros(layers, 1, c.num_key_value_heads, 256, c.head_dim)
    v = torch.zeros_like(k)
    with torch.no_grad():
        hidden = ours.talker.prefill(embeds[None], k, v)
        our_logits = ours.talker.logits(hidden)
        out = ref.talker(
            inputs_embeds=embeds[None],
            attention_mask=torch.ones(1, T, dtype=torch.long),
            use_cache=False,
        )
    torch.testing.assert_close(our_logits, out.logits, rtol=1e-4, atol=1e-4)


def test_greedy_codes_match_reference_custom_voice(tiny_custom_voice):
    expected = reference_greedy_codes(tiny_custom_voice, TEXT, "ryan", None, "english", FRAMES)
    got = our_codes(tiny_custom_voice, TEXT, "ryan", None, "english", FRAMES)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


def test_greedy_codes_match_reference_dialect_speaker_auto_language(tiny_custom_voice):
    # "eric" speaks Sichuan dialect: with language auto the dialect's codec id is used.
    expected = reference_greedy_codes(tiny_custom_voice, TEXT, "eric", None, "auto", FRAMES)
    got = our_codes(tiny_custom_voice, TEXT, "eric", None, "auto", FRAMES)
    assert torch.equal(got, expected)


def test_greedy_codes_match_reference_voice_design(tiny_voice_design):
    instructions = "A calm, low voice speaking slowly."
    expected = reference_greedy_codes(
        tiny_voice_design, TEXT, None, instructions, "english", FRAMES
    )
    got = our_codes(tiny_voice_design, TEXT, None, instructions, "english", FRAMES)
    assert torch.equal(got, expected)


def test_checkpoint_config_loads_in_the_reference_config_class(tiny_custom_voice):
    ref = reference_model(tiny_custom_voice)
    config = json.loads((tiny_custom_voice / "config.json").read_text())
    assert ref.config.talker_config.hidden_size == config["talker_config"]["hidden_size"]
    assert set(ref.get_supported_speakers()) == set(config["talker_config"]["spk_id"])
