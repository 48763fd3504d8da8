"""Word timestamps from the engine's own text-to-frame alignment (no second model).

Qwen3-TTS's dual track adds one text id to each talker position (model/prompt.py):
the prompt takes the first `W = VoicePrompt.prompt_text_ids` ids of the text stream
(a cloned voice's transcript, the text, tts_eos), the last of them beside codec_bos,
and the decode step that completes frame f adds the stream's id `W + f`, which first
conditions frame f + 1. So the text stream's id `s` first conditions frame
`max(0, s - W + 1)`: for a voice without a reference recording (W = 1) text token k
is read at frame k, for an in-context clone with a transcript of r tokens and R
frames at frame `max(0, r + k - R)`. A frame is `1 / frame_rate_hz` seconds of the
waveform and frame f's audio starts at `f / frame_rate_hz` (the codec's look-back
and the 25 Hz decoder's held-back blocks delay when audio is *delivered*, never
where a frame's samples lie in it; a clone's reference audio is cut off before
frame 0).

The rule this module applies, and the timestamps' meaning:
- a word is a run of non-whitespace characters of the request's text; it starts
  when the first frame conditioned on its first token starts;
- it ends where the next word starts, and the last word spoken of a piece of text
  at the end of that piece's audio (its EOS, or the length cap);
- its characters share its tokens' spans evenly (whitespace before a word takes no
  time, at the word's start), so character times fall between frame boundaries
  while word times are whole frames;
- a word none of whose tokens was read (the length cap cut the text) is not timed.

These are the times the model *reads* each word. The reference model has no fixed
delay between reading a token and speaking it, and it reads text faster (12.5 or 25
tokens a second) than anyone speaks (about 4 tokens a second): with trained weights
a word is spoken at or after its time here, never before (causality), and the gap
grows along an utterance. docs/timestamps.md states this limit.

Written on the engine thread only, by the scheduler, as it applies each frame
(`frame_made`, `piece_ended`); the words whose timing became known travel with the
next chunk (`take`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .api import TimedWord

_WORD = re.compile(r"\S+")

# text -> (token ids, their character spans [start, end) in the text): the tokenizer's.
EncodeOffsets = Callable[[str], tuple[list[int], list[tuple[int, int]]]]


class _Piece:
    """The words of one piece of text, and the frame where each of its tokens was read."""

    def __init__(self, base: int):
        self.base = base  # where the piece starts in the request's text
        self.token_frames: list[int] = []  # frame at which each token was first read
        self.offsets: list[tuple[int, int]] = []  # each token's characters in the piece
        self.text = ""  # the piece's text that `offsets` cover
        self.words: list[tuple[int, int, int]] = []  # (first char, end char, first token)
        self.emitted = 0  # words handed out


class WordClock:
    """A request's word timings, built as its frames are made (engine thread only)."""

    def __init__(
        self,
        encode_offsets: EncodeOffsets,
        frame_rate_hz: float,
        prompt_text_ids: int,
        lead_ids: int,
        text: str | None,
        pieces: list[str] | None = None,
    ):
        """`prompt_text_ids`: W, the text-stream ids the prompt takes; `lead_ids`: the
        stream's ids before the text (a clone's transcript). `text`: a whole request
        text and `pieces` the parts it is spoken in (text_pieces.py: each a stretch of
        it); None for a streamed text (one piece, its text as it arrives)."""
        self.encode_offsets = encode_offsets
        self.frame_rate_hz = frame_rate_hz
        # Text token k of a piece is the stream's id lead + k, first read at frame
        # max(0, lead + k - W + 1): at frame f, `f + shift` tokens have been read.
        self.shift = prompt_text_ids - lead_ids
        self.text = text
        self.bases = _piece_bases(text, pieces) if text is not None else [0]
        self.piece = _Piece(self.bases[0])
        self.chars_out = 0  # request text characters handed out (with the words)
        self.ready: list[TimedWord] = []

    # ---- the scheduler's calls, as it applies each frame
    def frame_made(self, piece_frame: int, frame: int, ids: list[int], text: str) -> None:
        """Frame `frame` of the request (`piece_frame` of its piece) is made. `ids`: the
        piece's committed token ids so far, `text`: the text they are of."""
        piece = self.piece
        read = min(len(ids), max(0, piece_frame + self.shift))
        if read <= len(piece.token_frames):
            return
        if len(piece.offsets) < read:
            self._learn(piece, text)
        piece.token_frames.extend([frame] * (read - len(piece.token_frames)))
        self._complete(piece, end_frame=None)

    def piece_ended(self, end_frame: int) -> None:
        """The piece's audio ends before frame `end_frame`: its last timed word too."""
        self._complete(self.piece, end_frame=end_frame)

    def next_piece(self, index: int) -> None:
        """The request moves on to its `index`-th piece (its frames go on counting)."""
        self.piece = _Piece(self.bases[index])

    def take(self) -> tuple[TimedWord, ...]:
        """The words timed since the last call."""
        ready, self.ready = self.ready, []
        return tuple(ready)

    # ---- internals
    def _learn(self, piece: _Piece, text: str) -> None:
        """The tokens' character spans and the words of the committed `text` (a whole
        piece once; a streamed text each time more of it is committed and read)."""
        _, piece.offsets = self.encode_offsets(text)
        piece.text = text
        piece.words = []
        token = 0  # words and tokens both in text order: one pass
        for match in _WORD.finditer(text):
            while token < len(piece.offsets) and piece.offsets[token][1] <= match.start():
                token += 1
            if token < len(piece.offsets) and piece.offsets[token][0] <= match.start():
                piece.words.append((match.start(), match.end(), token))

    def _complete(self, piece: _Piece, end_frame: int | None) -> None:
        """Time every word whose end is known: the next word's first token was read
        (or, with `end_frame`, the piece's audio ended)."""
        while piece.emitted < len(piece.words):
            start_char, end_char, token = piece.words[piece.emitted]
            if token >= len(piece.token_frames):
                return  # not read: not spoken yet (or never, when the piece ended)
            after = piece.emitted + 1
            if after < len(piece.words) and piece.words[after][2] < len(piece.token_frames):
                end = piece.token_frames[piece.words[after][2]]
                last_token = piece.words[after][2]
            elif end_frame is not None:
                end, last_token = end_frame, len(piece.offsets)
            else:
                return
            self.ready.append(self._timed(piece, start_char, end_char, token, last_token, end))
            piece.emitted += 1

    def _timed(
        self, piece: _Piece, start_char: int, end_char: int, first: int, stop: int, end: int
    ) -> TimedWord:
        rate = self.frame_rate_hz
        start = piece.token_frames[first]
        # Each token's span of frames: to the next token's frame, within the word's.
        spans = []
        for t in range(first, stop):
            t_start = piece.token_frames[t] if t < len(piece.token_frames) else end
            t_end = piece.token_frames[t + 1] if t + 1 < len(piece.token_frames) else end
            spans.append((piece.offsets[t], max(t_start, start), min(max(t_end, t_start), end)))
        chars, starts, ends = [], [], []
        source = self.text if self.text is not None else piece.text
        offset = self.chars_out
        for c in range(piece.base + start_char - offset):  # whitespace before: no time
            chars.append(source[offset + c])
            starts.append(start / rate)
            ends.append(start / rate)
        done = start_char  # a character split over two byte tokens goes with the first
        for (t_first, t_end), f0, f1 in spans:
            lo, hi = max(t_first, done), min(t_end, end_char)
            n = hi - lo
            for i in range(max(0, n)):
                chars.append(piece.text[lo + i])
                starts.append((f0 + (f1 - f0) * i / n) / rate)
                ends.append((f0 + (f1 - f0) * (i + 1) / n) / rate)
            done = max(done, hi)
        self.chars_out = piece.base + end_char
        return TimedWord(
            word=piece.text[start_char:end_char],
            start_s=start / rate,
            end_s=end / rate,
            text_offset=offset,
            characters=tuple(chars),
            char_start_s=tuple(starts),
            char_end_s=tuple(ends),
        )


def _piece_bases(text: str, pieces: list[str] | None) -> list[int]:
    """Where each piece starts in `text` (pieces are stretches of it, in order)."""
    if not pieces:
        return [0]
    bases, at = [], 0
    for piece in pieces:
        found = text.find(piece, at)
        at = found if found >= 0 else at
        bases.append(at)
        at += len(piece)
    return bases
