"""Long text as pieces the model can speak one after another.

A slot holds at most `max_tokens` text tokens of one utterance (the runner's
text buffer, and a prompt the model was trained to speak in one go), while
the API promises 4,096 characters. `split_text` cuts a long text where a
speaker would pause anyway: at sentence ends first, then at clause marks,
then at whitespace, and only for a run of text with none of these (a long
unbroken word, or CJK text without punctuation) between characters. It packs
consecutive parts back together while they fit, so a piece is as long as the
limit allows and the model hears whole sentences. Text that fits is one piece,
unchanged.

Punctuation covers Latin scripts and the scripts Qwen3-TTS speaks: Chinese and
Japanese full-width marks (。！？；，、), Korean (which uses Latin marks), the
Devanagari danda and Arabic marks.

Pure: tokens are counted by the `count_tokens` given, so tests need no model.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A sentence ends after terminal punctuation (and any closing quotes or
# brackets). Latin marks need whitespace after them ("3.14", "e.g.x" stay);
# full-width marks do not (CJK text has no spaces); line breaks always end one.
_SENTENCE_END = re.compile(
    r"(?:[.!?…]+[\"'”’»)\]]*(?=\s)|[。！？｡．!?]+[」』”’）》〉]*|[।॥؟۔]+)\s*|\n\s*"
)
# Clause marks: where a long sentence is cut before falling back to spaces.
_CLAUSE_END = re.compile(r"(?:[,;:—–]+(?=\s)|[，、；：،؛]+)\s*")
_SPACE = re.compile(r"\s+")


def split_text(text: str, count_tokens: Callable[[str], int], max_tokens: int) -> list[str]:
    """`text` as pieces, in order, each of at most `max_tokens` tokens.

    Pieces are stripped and never empty; joined with spaces they say what
    `text` says. A text that fits is returned as one piece, as given."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if not text.strip():
        return []
    if count_tokens(text) <= max_tokens:
        return [text]  # as given: a short text is tokenised as it always was
    return _pack(_parts(text.strip(), _SENTENCE_END), count_tokens, max_tokens, level=0)


_LEVELS = (_SENTENCE_END, _CLAUSE_END, _SPACE)


def _parts(text: str, boundary: re.Pattern) -> list[str]:
    """`text` cut after each match of `boundary`, keeping every character."""
    parts, start = [], 0
    for m in boundary.finditer(text):
        if m.end() > start:
            parts.append(text[start : m.end()])
            start = m.end()
    if start < len(text):
        parts.append(text[start:])
    return parts


def _pack(parts: list[str], count: Callable[[str], int], limit: int, level: int) -> list[str]:
    """Join consecutive parts while the piece fits; a part that alone does not
    fit is cut at the next finer boundary."""
    pieces: list[str] = []
    current = ""
    for part in parts:
        joined = current + part
        if count(joined.strip()) <= limit:
            current = joined
            continue
        if current.strip():
            pieces.append(current.strip())
        current = ""
        if count(part.strip()) <= limit:
            current = part
        else:
            pieces.extend(_cut(part, count, limit, level + 1))
    if current.strip():
        pieces.append(current.strip())
    return pieces


def _cut(part: str, count: Callable[[str], int], limit: int, level: int) -> list[str]:
    if level < len(_LEVELS):
        finer = _parts(part, _LEVELS[level])
        if len(finer) > 1:
            return _pack(finer, count, limit, level)
        return _cut(part, count, limit, level + 1)
    return _by_characters(part.strip(), count, limit)


def _by_characters(text: str, count: Callable[[str], int], limit: int) -> list[str]:
    """The longest prefixes that fit, one after another (binary search)."""
    pieces = []
    while text:
        lo, hi = 1, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid]) <= limit:
                lo = mid
            else:
                hi = mid - 1
        pieces.append(text[:lo].strip())
        text = text[lo:].lstrip()
    return [p for p in pieces if p]
