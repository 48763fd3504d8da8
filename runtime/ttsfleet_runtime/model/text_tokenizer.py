"""The text tokenizer of a checkpoint: Qwen2's byte-level BPE, read from
tokenizer.json when present, else from vocab.json + merges.txt +
tokenizer_config.json (the layout the released checkpoints ship)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

# Qwen2's pre-tokenisation split (the same rule as its tokenizer.json).
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class InvalidText(ValueError):
    """The text cannot be tokenised: it is not valid Unicode (a lone surrogate
    such as U+D800, which a JSON string's escapes can carry)."""


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> TextTokenizer:
        path = Path(path)
        if (path / "tokenizer.json").exists():
            return cls(Tokenizer.from_file(str(path / "tokenizer.json")))
        vocab = json.loads((path / "vocab.json").read_text())
        merges = []
        for line in (path / "merges.txt").read_text().splitlines():
            if line and not line.startswith("#version"):
                a, b = line.split(" ")
                merges.append((a, b))
        config = json.loads((path / "tokenizer_config.json").read_text())
        added = config.get("added_tokens_decoder", {})
        for token_id, token in added.items():
            vocab[token["content"]] = int(token_id)
        tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens(
            [
                AddedToken(t["content"], special=True, normalized=False, lstrip=False, rstrip=False)
                for t in added.values()
            ]
        )
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self._encoding(text).ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """`encode`'s ids and each one's characters [start, end) in `text` (word
        timestamps map tokens to words by them)."""
        encoding = self._encoding(text)
        return encoding.ids, [tuple(span) for span in encoding.offsets]

    def _encoding(self, text: str):
        try:
            return self._tok.encode(text, add_special_tokens=False)
        except (TypeError, UnicodeEncodeError) as e:
            # `tokenizers` raises TypeError for a str it cannot convert to UTF-8.
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as bad:
                raise InvalidText(
                    f"text is not valid Unicode: {bad.reason} at character {bad.start}"
                ) from e
            raise

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)
