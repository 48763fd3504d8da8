"""EngineStream: the caller's side of a sequence, an async iterator of AudioChunks.

The engine and codec threads hand chunks and the end over with
`call_soon_threadsafe`, so the caller's event loop never waits on the device.

Backpressure: a caller that stops taking chunks (its client stopped reading)
must not make the stream hold everything the engine can generate. The stream
counts, on the caller's loop, the audio waiting in it (handed over, not yet
taken); when that exceeds the request's `buffer_s` it asks the engine to pause
the request's decode steps (a `Pause` command: the scheduler owns the change),
and once the caller has taken it down to half the buffer, to resume. It asks
only while audio waits, so a paused stream always has audio for its caller:
it cannot wait on the engine while the engine waits on it. The caller taking a
chunk is the acknowledgement: the server's senders take the next chunk only
once the previous one is written to the connection, and a connection whose
client takes nothing ends by the send timeout (server/http_protocol.py). The
half-buffer hysteresis keeps a slow reader to one pause and one resume per
half buffer of audio, not a command per chunk.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

from .api import AudioChunk, EngineError, FinishReason, SampleFormat


class EngineStream:
    def __init__(
        self,
        request_id: str,
        loop: asyncio.AbstractEventLoop,
        cancel: Callable[[object], None],
        pace: Callable[[object, bool], None] | None = None,
        buffer_s: float | None = None,
        sample_format: SampleFormat = "f32",
    ):
        self.request_id = request_id
        self.sample_format = sample_format  # what its chunks carry (in each codec job: CodecStream)
        self._loop = loop
        self._cancel = cancel  # the engine's: cancel(seq)
        self._pace = pace  # the engine's: pace(seq, paused)
        self.buffer_s = buffer_s  # None: never paused
        # Caller's loop only: audio handed over and not yet taken, and whether the
        # engine was last asked to pause the sequence.
        self.waiting_s = 0.0
        self.paused = False
        self._queue: asyncio.Queue[AudioChunk | None] = asyncio.Queue()
        self._finish_reason: FinishReason | None = None
        self.seq = None  # the engine's Sequence, set at admission; None once released
        self._error: EngineError | None = None  # the sequence's, once released
        self._end_lock = threading.Lock()
        self._ended = False
        # Run on the caller's loop when the stream ends (e.g. stop the task
        # feeding the sequence's streamed text).
        self.on_end: list[Callable[[], object]] = []
        # Playback, as the listener sees it (the engine's lead over it): when
        # the first chunk was handed out and how much audio has been since.
        self.first_audio_at: float | None = None
        self.audio_delivered_s = 0.0
        self.chunks_delivered = 0
        self.frames_delivered = 0  # frames whose audio was handed out
        # Frames the codec worker has decoded: those of the chunks handed out, and
        # those a decoder holds until their audio is final (25 Hz look-ahead).
        self.frames_decoded = 0

    def __aiter__(self) -> AsyncIterator[AudioChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[AudioChunk]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            self._taken(item)
            yield item

    def cancel(self) -> None:
        if self.seq is not None:
            self._cancel(self.seq)

    def release(self) -> None:
        """The caller is done with the stream: one still running is cancelled, and the
        stream lets go of the engine's sequence (its error, if any, is kept).

        The stream and its sequence refer to each other, so without this what a
        finished request leaves is a reference cycle that only a full collection of
        the garbage collector frees. Under load those passes stop every thread while
        they run: on the H100 at 120 req/s each freed 16-20 thousand such objects and
        took 80-110 ms, every 8 s."""
        if not self._ended:
            self.cancel()
        if self.seq is not None:
            self._error = self.seq.error
            self.seq = None

    @property
    def ended(self) -> bool:
        """Whether the stream's end was handed over (it may not have reached the
        caller's loop yet): a chunk delivered after it is never read."""
        return self._ended

    @property
    def finish_reason(self) -> FinishReason | None:
        return self._finish_reason

    @property
    def error(self) -> EngineError | None:
        if self._finish_reason != "error":
            return None
        return self.seq.error if self.seq is not None else self._error

    # Called from the engine and codec threads.
    def deliver(self, chunk: AudioChunk) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = chunk.t_emitted
        self.audio_delivered_s += chunk.duration_s
        self.chunks_delivered += 1
        self.frames_delivered += chunk.frames
        try:
            self._loop.call_soon_threadsafe(self._arrived, chunk)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass

    # Caller's loop: the backpressure (see the module's docstring).
    def _arrived(self, chunk: AudioChunk) -> None:
        self._queue.put_nowait(chunk)
        self.waiting_s += chunk.duration_s
        if self.buffer_s is not None and not self.paused and self.waiting_s > self.buffer_s:
            self._ask(paused=True)

    def _taken(self, chunk: AudioChunk) -> None:
        self.waiting_s -= chunk.duration_s
        if self.paused and self.waiting_s <= self.buffer_s / 2:
            self._ask(paused=False)

    def _ask(self, paused: bool) -> None:
        if self.seq is None or self._ended or self._pace is None:
            return  # released or ended: nothing left to pace
        self.paused = paused
        self._pace(self.seq, paused)

    def end(self, reason: FinishReason) -> None:
        with self._end_lock:
            if self._ended:
                return
            self._ended = True

        def _end():
            self._finish_reason = reason
            self._queue.put_nowait(None)
            callbacks, self.on_end = self.on_end, []  # they may refer back to the stream
            for callback in callbacks:
                callback()

        try:
            self._loop.call_soon_threadsafe(_end)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass
