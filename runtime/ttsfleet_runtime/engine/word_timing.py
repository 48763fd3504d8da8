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
next chunk (`take`) as `WordMark`s, which the reader of the chunk turns into
`TimedWord`s: the engine thread, which every stream waits for, only counts frames
and marks word ends (a few microseconds a frame; building the words there cost
several times that).
"""

from __future__ import annotations

import dataclasses
import re

from .api import TimedWord

_WORD = re.compile(r"\S+")


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
        frame_rate_hz: float,
        prompt_text_ids: int,
        lead_ids: int,
        text: str | None,
        pieces: list[str] | None = None,
    ):
        """`prompt_text_ids`: W, the text-stream ids the prompt takes; `lead_ids`: the
        stream's ids before the text (a clone's transcript). `text`: a whole request
        text and `pieces` the parts it is spoken in (text_pieces.py: each a stretch of
        it); None for a streamed text (one piece, its text as it arrives). The
        tokens' character spans come with the text (`TextFeed.offsets`)."""
        self.frame_rate_hz = frame_rate_hz
        # Text token k of a piece is the stream's id lead + k, first read at frame
        # max(0, lead + k - W + 1): at frame f, `f + shift` tokens have been read.
        self.shift = prompt_text_ids - lead_ids
        self.text = text
        self.bases = _piece_bases(text, pieces) if text is not None else [0]
        self.piece = _Piece(self.bases[0])
        self.chars_out = 0  # request text characters handed out (with the words)
        self.ready: list[WordMark] = []

    # ---- the scheduler's calls, as it applies each frame
    def frame_made(self, piece_frame: int, frame: int, feed) -> None:
        """Frame `frame` of the request (`piece_frame` of its piece) is made; `feed`: the
        piece's `TextFeed` (its committed ids, their character spans and their text)."""
        piece = self.piece
        read = min(len(feed.ids), max(0, piece_frame + self.shift))
        if read <= len(piece.token_frames):
            return
        if len(piece.offsets) < read:
            # The piece's words, once for a whole text; again for a streamed one as
            # more of it is committed (the feed tokenised it: no tokenising here).
            _words_of(piece, feed.committed, feed.offsets)
        piece.token_frames.extend([frame] * (read - len(piece.token_frames)))
        self._complete(piece, end_frame=None)

    def piece_ended(self, end_frame: int) -> None:
        """The piece's audio ends before frame `end_frame`: its last timed word too."""
        self._complete(self.piece, end_frame=end_frame)

    def next_piece(self, index: int) -> None:
        """The request moves on to its `index`-th piece (its frames go on counting)."""
        self.piece = _Piece(self.bases[index])

    def take(self) -> tuple[WordMark, ...]:
        """The words timed since the last call (`WordMark.timed()` makes each a TimedWord)."""
        ready, self.ready = self.ready, []
        return tuple(ready)

    # ---- internals
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
            source = self.text if self.text is not None else piece.text
            self.ready.append(
                WordMark(
                    self.frame_rate_hz,
                    source,
                    self.chars_out,
                    piece.base,
                    piece.text,
                    piece.offsets,
                    piece.token_frames,
                    len(piece.token_frames),
                    start_char,
                    end_char,
                    token,
                    last_token,
                    end,
                )
            )
            self.chars_out = piece.base + end_char
            piece.emitted += 1


@dataclasses.dataclass(frozen=True, slots=True)
class WordMark:
    """A word whose timing is known, as the engine thread leaves it: references to its
    piece's token spans and frames (lists that only grow, read here below `frames_known`)
    and where the word lies. `timed()` makes the TimedWord, on the reader's thread
    (`AudioChunk.words`): the engine thread only marks."""

    rate: float  # frames a second
    source: str  # the request's text (a streamed one's committed text)
    offset: int  # where the word's leading whitespace starts in `source`
    base: int  # where its piece starts in `source`
    piece_text: str
    offsets: list[tuple[int, int]]  # the piece's tokens' characters
    frames: list[int]  # the frame that read each of the piece's tokens
    frames_known: int  # how many of `frames` were written when the word was marked
    start_char: int  # the word in `piece_text`
    end_char: int
    first: int  # its first token
    stop: int  # the token after its last
    end: int  # its end frame

    def timed(self) -> TimedWord:
        """Its TimedWord: start and end, and each token's share of the word's characters
        (`TimedWord.char_start_s` computes the characters' times where they are read)."""
        rate, frames, known, end = self.rate, self.frames, self.frames_known, self.end
        start = frames[self.first]
        spans = []
        done = self.start_char  # a character split over two byte tokens goes with the first
        for t in range(self.first, self.stop):
            t_first, t_end = self.offsets[t]
            n = min(t_end, self.end_char) - max(t_first, done)
            if n <= 0:
                continue
            f0 = max(frames[t] if t < known else end, start)
            f1 = min(max(frames[t + 1] if t + 1 < known else end, f0), end)
            spans.append((n, f0 / rate, f1 / rate))
            done = max(t_first, done) + n
        if done < self.end_char:  # characters no token named: at the word's end, no time
            spans.append((self.end_char - done, end / rate, end / rate))
        return TimedWord(
            word=self.piece_text[self.start_char : self.end_char],
            start_s=start / rate,
            end_s=end / rate,
            text_offset=self.offset,
            leading=self.source[self.offset : self.base + self.start_char],
            token_spans=tuple(spans),
        )


def _words_of(piece: _Piece, text: str, offsets: list[tuple[int, int]]) -> None:
    """Give `piece` its text, its tokens' spans and its words (each with its first token)."""
    piece.offsets, piece.text, piece.words = offsets, text, []
    token = 0  # words and tokens both in text order: one pass
    for match in _WORD.finditer(text):
        while token < len(offsets) and offsets[token][1] <= match.start():
            token += 1
        if token < len(offsets) and offsets[token][0] <= match.start():
            piece.words.append((match.start(), match.end(), token))


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
