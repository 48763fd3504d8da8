"""Our model generating codes offline through the model runner (no engine
thread, no codec): the counterpart of the reference's `generate`."""

from __future__ import annotations

import torch

from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.engine.prefill_rows import Prompt, SlotParams
from ttsfleet_runtime.model.ops import EAGER, TalkerOps
from ttsfleet_runtime.model.prompt import PromptBuilder
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer
from ttsfleet_runtime.model.weights import load_model

GREEDY = SlotParams(
    temperature=0.0,
    top_k=50,
    top_p=1.0,
    repetition_penalty=1.05,
    subtalker_temperature=0.0,
    subtalker_top_k=50,
    subtalker_top_p=1.0,
    seed=0,
    min_frames=0,
)


def our_codes(
    checkpoint,
    text: str,
    voice,
    instructions,
    language: str,
    frames: int,
    params: SlotParams = GREEDY,
    cloned=None,
    ops: TalkerOps = EAGER,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    cuda_graphs: bool = False,
    **load,
) -> torch.Tensor:
    """-> codes [n <= frames, groups], stopping at EOS like the reference. `cloned`: a
    `ClonedVoice` for a Base checkpoint; `ops`: the model's operations (model/ops.py);
    `load`: more of `load_model`'s arguments (weights="fp8", ...)."""
    model = load_model(checkpoint, device, dtype, max_positions=512, ops=ops, **load)
    builder = PromptBuilder(model.config, TextTokenizer.from_checkpoint(checkpoint))
    runner = ModelRunner(
        model, max_batch=2, max_len=512, max_text=256, device=device, cuda_graphs=cuda_graphs
    )
    prompt = builder.voice(voice, instructions, language, cloned)
    stream = builder.text_stream(prompt, builder.text_ids(text), closed=True)
    embeds = builder.prefill_embeds(model, prompt, stream[: prompt.prompt_text_ids])
    # The engine's scheduler hands out KV blocks; here slot 0 takes every position's.
    runner.set_blocks(0, list(range(1, 1 + runner.cache.host_table.shape[1])))
    runner.prefill([Prompt(0, embeds, params)])
    runner.set_text(0, stream[prompt.prompt_text_ids :], 0)
    out = []
    position = embeds.shape[0]
    for _ in range(frames):
        codes, nxt = runner.decode(1, [True], position + 1)
        position += 1
        out.append(codes[0])
        if int(nxt[0]) == model.config.talker.codec_eos_token_id:
            break
    return torch.stack(out)
