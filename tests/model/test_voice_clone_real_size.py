"""The Base prompt at the released sizes' dimensions (0.6B, 1.7B): built on the meta
device, so the shapes are checked without a real-size checkpoint's memory or time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ttsfleet_runtime.checkpoint.sizes import model_config
from ttsfleet_runtime.checkpoint.text_tokenizer_files import write_text_tokenizer
from ttsfleet_runtime.engine.api import ClonedVoice
from ttsfleet_runtime.model.code_predictor import CodePredictor
from ttsfleet_runtime.model.config import TTSConfig
from ttsfleet_runtime.model.prompt import PromptBuilder
from ttsfleet_runtime.model.talker import Talker
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer
from ttsfleet_runtime.model.weights import LoadedModel


@pytest.mark.parametrize(("size", "hidden"), [("0.6B", 1024), ("1.7B", 2048)])
def test_base_prompts_have_the_released_shapes(tmp_path, size, hidden):
    config = TTSConfig.from_dict(model_config(size, "Base"))
    write_text_tokenizer(tmp_path)
    builder = PromptBuilder(config, TextTokenizer.from_checkpoint(tmp_path))
    t = config.talker
    with torch.device("meta"):
        model = LoadedModel(
            tmp_path, config, Talker(t, 64), CodePredictor(t.code_predictor, t.hidden_size)
        )
    frames = 125  # a 10 s reference recording
    codes = np.random.default_rng(0).integers(0, 2048, (frames, 16))
    embedding = np.zeros(hidden, np.float32)
    for cloned, text_ids in [
        (ClonedVoice(embedding), 1),
        (ClonedVoice(embedding, codes, "A ten second reference."), 1 + frames),
    ]:
        voice = builder.voice(None, None, "english", cloned)
        assert voice.prompt_text_ids == text_ids
        stream = builder.text_stream(voice, builder.text_ids("Hello."), closed=True)
        embeds = builder.prefill_embeds(model, voice, stream[:text_ids])
        # role 3 + think, think_bos, english, think_eos, speaker, codec_pad + text ids
        assert embeds.shape == (3 + 6 + text_ids, hidden) == (builder.prompt_length(voice), hidden)
    with pytest.raises(ValueError, match=f"{hidden} finite"):
        builder.voice(None, None, "english", ClonedVoice(np.zeros(hidden // 2, np.float32)))
