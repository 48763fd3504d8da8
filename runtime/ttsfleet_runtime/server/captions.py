"""Captions (SRT, WebVTT) and alignment JSON from an utterance's timed words.

Cues follow the usual subtitling limits: at most two lines of `MAX_LINE_CHARS`
characters, on screen at most `MAX_CUE_S` seconds, and a new cue after a
sentence ends, so a cue never runs one sentence into the next. A single word
longer than a line gets a line of its own. Times are the engine's word times
(engine/word_timing.py), so a cue shows from its first word's start to its last
word's end.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from ..engine.api import TimedWord

MAX_LINE_CHARS = 42
MAX_LINES = 2
MAX_CUE_S = 7.0
_SENTENCE_END = re.compile(r"[.!?…。！？]+[\"'”’»)\]]*$")


@dataclasses.dataclass(frozen=True)
class Cue:
    start_s: float
    end_s: float
    lines: tuple[str, ...]


def cues(
    words: Iterable[TimedWord],
    max_line_chars: int = MAX_LINE_CHARS,
    max_lines: int = MAX_LINES,
    max_cue_s: float = MAX_CUE_S,
) -> list[Cue]:
    """The words as cues within the limits (module docstring)."""
    out: list[Cue] = []
    lines: list[list[str]] = [[]]
    first: TimedWord | None = None
    last: TimedWord | None = None

    def close() -> None:
        nonlocal lines, first
        if first is not None and last is not None:
            text = tuple(" ".join(line) for line in lines if line)
            out.append(Cue(first.start_s, last.end_s, text))
        lines, first = [[]], None

    for word in words:
        if first is not None and word.end_s - first.start_s > max_cue_s:
            close()
        line = lines[-1]
        if line and len(" ".join([*line, word.word])) > max_line_chars:
            if len(lines) == max_lines:
                close()
            else:
                lines.append([])
        lines[-1].append(word.word)
        first = first or word
        last = word
        if _SENTENCE_END.search(word.word):
            close()
    close()
    return out


def srt(items: list[Cue]) -> str:
    """SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`."""
    blocks = [
        f"{i}\n{_clock(c.start_s, ',')} --> {_clock(c.end_s, ',')}\n" + "\n".join(c.lines)
        for i, c in enumerate(items, 1)
    ]
    return "\n\n".join(blocks) + "\n" if blocks else ""


def vtt(items: list[Cue]) -> str:
    """WebVTT: the header, then cues `HH:MM:SS.mmm --> HH:MM:SS.mmm`."""
    blocks = [
        f"{_clock(c.start_s, '.')} --> {_clock(c.end_s, '.')}\n" + "\n".join(c.lines) for c in items
    ]
    return "WEBVTT\n\n" + "\n\n".join(blocks) + ("\n" if blocks else "")


CAPTION_FORMATS = {"srt": srt, "vtt": vtt}


def captions(words: list[TimedWord], fmt: str) -> str:
    return CAPTION_FORMATS[fmt](cues(words))


def _clock(seconds: float, decimal: str) -> str:
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def alignment(words: Iterable[TimedWord]) -> dict | None:
    """ElevenLabs' character alignment of `words` (None for none), times rounded to ms."""
    chars: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    for word in words:
        chars.extend(word.characters)
        starts.extend(round(t, 3) for t in word.char_start_s)
        ends.extend(round(t, 3) for t in word.char_end_s)
    if not chars:
        return None
    return {
        "characters": chars,
        "character_start_times_seconds": starts,
        "character_end_times_seconds": ends,
    }


def word_times(words: Iterable[TimedWord]) -> list[dict]:
    """Kokoro-FastAPI's word timestamps: `word`, `start_time`, `end_time` (seconds)."""
    return [
        {"word": w.word, "start_time": round(w.start_s, 3), "end_time": round(w.end_s, 3)}
        for w in words
    ]
