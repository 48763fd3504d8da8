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
    `text` says. A text that fits is returned as one piece, as given.

    Runs at admission, on the server's event loop: each part is counted once
    and parts are packed by the sum of their counts (a cut falls where the
    tokenizer splits words anyway, so a part alone tokenises as it does inside
    the whole), then each piece is counted once to be sure (parts are given
    back where it does not fit): about three tokenisations of the text (the
    whole, its parts, its pieces), where counting every candidate piece took
    up to 0.7 s for 4,096 characters.
    """
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    if not text.strip():
        return []
    if count_tokens(text) <= max_tokens:
        return [text]  # as given: a short text is tokenised as it always was
    return _split(text.strip(), count_tokens, max_tokens, level=0)


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


def _split(text: str, count: Callable[[str], int], limit: int, level: int) -> list[str]:
    """Cut `text` (too long) at this level's boundaries and pack the parts; a
    part that alone does not fit is cut at the next finer level."""
    if level == len(_LEVELS):
        return _by_characters(text, count, limit)
    parts = _parts(text, _LEVELS[level])
    if len(parts) == 1:
        return _split(text, count, limit, level + 1)
    # Without its trailing space: inside the whole text that space starts the
    # next word's token (" word"), it is no token of its own.
    estimates = [count(part.rstrip()) for part in parts]
    pieces: list[str] = []
    i = 0
    while i < len(parts):
        if estimates[i] > limit:
            pieces.extend(_split(parts[i].strip(), count, limit, level + 1))
            i += 1
            continue
        j, total = i, 0
        while j < len(parts) and total + estimates[j] <= limit:
            total += estimates[j]
            j += 1
        # The estimate can be low where a word tokenises differently at the
        # start of a text: then give back parts (bisecting) until it fits.
        piece = "".join(parts[i:j]).strip()
        if count(piece) > limit:
            fits, too_many = i, j  # parts[i:fits] fit (none do, trivially)
            while too_many - fits > 1:
                mid = (fits + too_many) // 2
                if count("".join(parts[i:mid]).strip()) <= limit:
                    fits = mid
                else:
                    too_many = mid
            if fits == i:  # its first part alone is over after all: cut it finer
                pieces.extend(_split(parts[i].strip(), count, limit, level + 1))
                i += 1
                continue
            j = fits
            piece = "".join(parts[i:j]).strip()
        if piece:
            pieces.append(piece)
        i = j
    return pieces


def _by_characters(text: str, count: Callable[[str], int], limit: int) -> list[str]:
    """The longest prefixes that fit, one after another: a galloping search
    from `limit` characters, so no call tokenises much more than a piece."""
    pieces = []
    while text:
        fits, too_long = 0, len(text) + 1
        probe = min(limit, len(text))
        while probe < too_long:  # gallop: double while it fits
            if count(text[:probe]) <= limit:
                fits = probe
                probe = min(2 * probe, len(text)) if probe < len(text) else too_long
            else:
                too_long = probe
        while too_long - fits > 1:  # then bisect between the last fit and the first miss
            mid = (fits + too_long) // 2
            if count(text[:mid]) <= limit:
                fits = mid
            else:
                too_long = mid
        fits = max(fits, 1)  # one character that is more tokens than the limit still moves on
        pieces.append(text[:fits].strip())
        text = text[fits:].lstrip()
    return [p for p in pieces if p]
