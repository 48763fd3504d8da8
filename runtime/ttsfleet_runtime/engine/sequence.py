"""One request's life inside the engine: its text as it arrives, its slot, the
frames generated but not yet turned into audio, and its stream to the caller."""

from __future__ import annotations

import enum
import threading
import time

import numpy as np

from .api import FinishReason, SamplingParams


class TextFeed:
    """The request text as token ids, growing while a text stream delivers deltas.

    Ids are committed only up to the last whitespace of the text so far: a BPE
    token can still change while its word is incomplete, and a committed id is
    final. The whole text commits once the stream ends. Thread-safe: deltas
    come from the asyncio thread, the engine thread reads.
    """

    def __init__(self, encode, text: str | None = None):
        self._encode = encode
        self._lock = threading.Lock()
        self._text = text or ""
        self._closed = text is not None
        self._dirty = True
        self.ids: list[int] = []
        self.error: BaseException | None = None

    def feed(self, delta: str) -> None:
        with self._lock:
            self._text += delta
            self._dirty = True

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
        ids = self._encode(stable) if stable.strip() else []
        grew = len(ids) > len(self.ids)
        if len(ids) >= len(self.ids):
            self.ids = ids
        return grew or closed


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, request_id: str, params: SamplingParams, seed: int, voice, text: TextFeed,
                 stream, prompt_extra: int = 0):
        self.request_id = request_id
        self.params = params
        self.seed = seed
        self.voice = voice  # the model's VoicePrompt
        self.text = text
        self.stream = stream  # delivers chunks to the caller's event loop
        self.status = Status.WAITING
        self.slot: int | None = None
        self.finish_reason: FinishReason | None = None
        self.t_submitted = time.monotonic()
        self.t_admitted: float | None = None
        self.position = 0  # next talker position (host copy)
        self.frames = 0  # frames generated
        self.text_sent = 0  # trailing text ids handed to the runner
        self.text_final = False  # tts_eos handed to the runner
        self.pending: list[np.ndarray] = []  # frames awaiting the codec
        self.chunks = 0
        self.codec_slot: int | None = None  # owned by the codec worker
        self.codec_closed = False
        self.cancel_requested = False
        self.all_codes: list[np.ndarray] = []  # every frame, for tests and debugging

    @property
    def ready_for_prefill(self) -> bool:
        return bool(self.text.ids) or self.text.closed

    @property
    def runnable(self) -> bool:
        # The step for frame f adds trailing text id f; wait until it is known.
        return self.text_final or self.frames < self.text_sent

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED
