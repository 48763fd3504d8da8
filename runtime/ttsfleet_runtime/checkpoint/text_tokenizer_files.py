"""Writes the text tokenizer files of a checkpoint: a byte-level BPE in the
Qwen2 layout (vocab.json, merges.txt, tokenizer_config.json).

The real 151k-token vocabulary cannot be downloaded here, so a small BPE is
trained on a fixed corpus; it encodes any text (all 256 bytes are tokens) and
puts the special tokens the prompt format uses at their real ids.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from .sizes import SPECIAL_TOKENS

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! This is a speech synthesis test of the streaming engine.",
    "Good morning. How are you today? I am fine, thank you, and you?",
    "Streaming speech must start quickly and never stall while the batch grows.",
    "We measure every millisecond of latency between the request and the first audio.",
    "One, two, three, four, five, six, seven, eight, nine, ten.",
    "今天天气很好，我们一起去公园散步吧。",
    "你好，欢迎使用语音合成服务。",
    "Bonjour tout le monde, ceci est un essai.",
    "Guten Tag, wie geht es Ihnen?",
]
_VOCAB_SIZE = 1000


def write_text_tokenizer(out_dir: str | Path) -> None:
    out = Path(out_dir)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The prompt format needs the role words as single tokens, as in Qwen2's
    # vocabulary (the prompt builder slices "<|im_start|>assistant\n" as 3 ids).
    roles = ["assistant\n", "user\n", "system\n"] * 200
    bpe.train_from_iterator(_CORPUS * 4 + roles, trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    added = {
        str(i): dict(
            content=t, lstrip=False, normalized=False, rstrip=False, single_word=False, special=True
        )
        for t, i in sorted(SPECIAL_TOKENS.items(), key=lambda kv: kv[1])
    }
    config = dict(
        tokenizer_class="Qwen2Tokenizer",
        added_tokens_decoder=added,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t != "<|endoftext|>"],
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        errors="replace",
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        model_max_length=131072,
    )
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
