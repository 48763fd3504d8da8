"""One request's life inside the engine: its text as it arrives, its slot, the
frames generated but not yet turned into audio, and its stream to the caller.

A long text is spoken as pieces (engine/text_pieces.py), one after another in
the same slot and into the same stream: each piece is prefilled afresh when
the one before it says EOS, so `frames` counts the whole request and
`piece_frames` the current piece (the runner's frame counter).

Who writes what: the front end builds a Sequence and hands it to the engine
thread (a command); from then on only the engine thread writes it, its status
only through the scheduler. The codec worker keeps its own state per stream
(keyed by `key`) and never writes here."""

from __future__ import annotations

import enum
import itertools
import threading
import time

import numpy as np

from .api import EngineError, FinishReason, SamplingParams
from .word_timing import WordClock


class TextFeed:
    """The request text as token ids, growing while a text stream delivers deltas.

    Ids are committed only up to the last whitespace of the text so far: a BPE
    token can still change while its word is incomplete, and a committed id is
    final. The whole text commits once the stream ends. Thread-safe: deltas
    come from the asyncio thread, the engine thread reads.
    """

    def __init__(
        self,
        encode,
        text: str | None = None,
        ids: list[int] | None = None,
        *,
        encode_offsets=None,
        offsets: list[tuple[int, int]] | None = None,
    ):
        """A whole `text` (closed at once) or, without one, a stream of deltas. `ids`:
        the whole text's, when the caller has tokenised it already (admission
        does, on the event loop): the engine thread then need not. With
        `encode_offsets` (text -> ids and each one's characters) the feed keeps its
        ids' character spans too (`offsets`, for word timestamps), from the same
        tokenisation; `offsets`: the whole text's, given with `ids`."""
        if ids is not None and text is None:
            raise ValueError("ids are a whole text's: give the text too")
        self.encode = encode  # text -> token ids
        self.encode_offsets = encode_offsets
        self._lock = threading.Lock()
        self._text = text or ""
        self._closed = text is not None
        self._dirty = ids is None
        self.ids: list[int] = list(ids) if ids is not None else []
        # The text `ids` are of: the whole text, or a streamed one's committed part.
        self.committed = self._text if self._closed else ""
        self.offsets: list[tuple[int, int]] = list(offsets) if offsets is not None else []
        self.error: BaseException | None = None

    def feed(self, delta: str) -> bool:
        """Add `delta`; True when it may commit ids (it holds whitespace, which ends a
        word): the engine need not be woken for one that cannot."""
        with self._lock:
            self._text += delta
            self._dirty = True
        return " " in delta or "\n" in delta

    def close(self, error: BaseException | None = None) -> None:
        with self._lock:
            self._closed = True
            self._dirty = True
            self.error = error

    @property
    def closed(self) -> bool:
        return self._closed

    def refresh(self) -> bool:
        """Re-tokenise if text arrived; True when more ids were committed (or the feed closed)."""
        with self._lock:
            if not self._dirty:
                return False
            self._dirty = False
            text, closed = self._text, self._closed
        if closed:
            stable = text
        else:
            cut = max(text.rfind(" "), text.rfind("\n"))
            stable = text[:cut] if cut > 0 else ""
        if stable == self.committed and (self.ids or not stable.strip()):
            return closed  # no word completed since: nothing to tokenise
        ids, offsets = self._tokenise(stable)
        grew = len(ids) > len(self.ids)
        if len(ids) >= len(self.ids):
            self.ids, self.offsets, self.committed = ids, offsets, stable
        return grew or closed

    def _tokenise(self, stable: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids (and spans) of `stable`, which extends the committed text. Only the
        text past the committed part is tokenised where that part ends a word and the
        rest starts with one space before a non-space: Qwen2's pre-tokeniser never
        joins a word to the space after it (a space starts the next word's token),
        and NFC composes nothing across a space, so the whole text's ids are the
        committed ids followed by the rest's. Re-tokenising all the text so far at
        every delta cost the engine thread O(length) a delta, O(length^2) an
        utterance, with the core's lock held (issue 36)."""
        old = self.committed
        rest = stable[len(old) :]
        if not (
            old
            and stable.startswith(old)
            and not old[-1].isspace()
            and rest[:1] == " "
            and rest[1:2].strip()
        ):
            return self._encode(stable)
        ids, offsets = self._encode(rest)
        shift = len(old)
        return self.ids + ids, self.offsets + [(a + shift, b + shift) for a, b in offsets]

    def _encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        if not text.strip():
            return [], []
        if self.encode_offsets is not None:
            ids, offsets = self.encode_offsets(text)
            return list(ids), list(offsets)
        return list(self.encode(text)), []


# Engine-unique keys (a request id is the caller's and need not be unique).
_keys = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(
        self,
        request_id: str,
        params: SamplingParams,
        seed: int,
        voice,
        text: TextFeed,
        stream,
        later_pieces: list[str] | None = None,
        *,
        prompt_length: int,
        keep_codes: bool = False,
        times_slot: bool = True,
        background: bool = False,
    ):
        self.key = next(_keys)
        # Batch work (SynthesisRequest.priority "batch"): scheduled after interactive requests.
        self.background = background
        self.request_id = request_id
        self.params = params
        self.seed = seed
        self.voice = voice  # the model's VoicePrompt
        self.prompt_length = prompt_length  # positions each piece's prefill takes
        self.text = text  # the piece being spoken
        self.later_pieces = list(later_pieces or ())  # whole-text pieces still to speak
        self.piece = 0  # index of the piece being spoken
        self.stream = stream  # delivers chunks to the caller's event loop
        self.status = Status.WAITING
        self.slot: int | None = None
        self.finish_reason: FinishReason | None = None
        self.error: EngineError | None = None  # why it ended with "error", when known
        self.t_submitted = time.monotonic()
        self.t_admitted: float | None = None  # when the scheduler gave it a slot
        self.times_slot = times_slot  # its time in a slot counts in the retry hints
        self.awaiting_prefill = True  # the current piece is not in its slot yet
        self.position = 0  # next talker position (host copy)
        self.kv_blocks: list[int] = []  # KV blocks it holds (engine/kv_blocks.py)
        self.frames = 0  # frames generated, all pieces
        self.piece_frames = 0  # frames generated for the current piece
        self.text_sent = 0  # trailing text ids of the piece handed to the runner
        self.text_final = False  # tts_eos handed to the runner
        self.pending: list[np.ndarray] = []  # frames awaiting the codec
        self.chunks = 0
        self.text_pump = None  # the asyncio task feeding a streamed text, if any
        # Its caller has more audio waiting than its buffer (a `Pause` command, applied
        # by the scheduler): left out of the decode steps until a `Resume`.
        self.paused = False
        # Word timestamps, only where the request asks (`SynthesisRequest.timestamps`):
        # the scheduler records in it where each text token was read (word_timing.py).
        self.word_clock: WordClock | None = None
        # Every frame, only where a test or a debugging run asks (`keep_codes`).
        self.all_codes: list[np.ndarray] | None = [] if keep_codes else None

    @property
    def ready_for_prefill(self) -> bool:
        # The prompt takes the first ids of the text stream (a cloned voice's
        # transcript, then the text): all of them must be known, or the text done.
        known = len(self.voice.ref_text_ids) + len(self.text.ids)
        return known >= self.voice.prompt_text_ids or self.text.closed

    @property
    def runnable(self) -> bool:
        # The step for frame f adds trailing text id f; wait until it is known. A
        # paused row (its caller is behind) stays in its slot, not stepped.
        if self.awaiting_prefill or self.paused:
            return False
        return self.text_final or self.piece_frames < self.text_sent

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def piece_seed(self) -> int:
        """The sampling seed of the current piece: the request's seed for the
        first (a short text samples as it always did), a distinct one per later
        piece so pieces do not repeat each other's noise."""
        if self.piece == 0:
            return self.seed
        return (self.seed + self.piece * 0x9E3779B1) & 0x7FFFFFFF

    def start_next_piece(self) -> None:
        """Move on to the next whole-text piece; its prefill comes next."""
        self.text = TextFeed(
            self.text.encode, self.later_pieces.pop(0), encode_offsets=self.text.encode_offsets
        )
        self.piece += 1
        self.piece_frames = 0
        self.text_sent = 0
        self.text_final = False
        self.awaiting_prefill = True
