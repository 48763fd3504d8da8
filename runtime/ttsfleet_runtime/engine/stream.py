"""EngineStream: the caller's side of a sequence, an async iterator of AudioChunks.

The engine and codec threads hand chunks and the end over with
`call_soon_threadsafe`, so the caller's event loop never waits on the device.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

from .api import AudioChunk, EngineError, FinishReason


class EngineStream:
    def __init__(
        self, request_id: str, loop: asyncio.AbstractEventLoop, cancel: Callable[[object], None]
    ):
        self.request_id = request_id
        self._loop = loop
        self._cancel = cancel  # the engine's: cancel(seq)
        self._queue: asyncio.Queue[AudioChunk | None] = asyncio.Queue()
        self._finish_reason: FinishReason | None = None
        self.seq = None  # the engine's Sequence, set at admission
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
            yield item

    def cancel(self) -> None:
        if self.seq is not None:
            self._cancel(self.seq)

    @property
    def finish_reason(self) -> FinishReason | None:
        return self._finish_reason

    @property
    def error(self) -> EngineError | None:
        return self.seq.error if self.seq is not None and self._finish_reason == "error" else None

    # Called from the engine and codec threads.
    def deliver(self, chunk: AudioChunk) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = chunk.t_emitted
        self.audio_delivered_s += chunk.duration_s
        self.chunks_delivered += 1
        self.frames_delivered += chunk.frames
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass

    def end(self, reason: FinishReason) -> None:
        with self._end_lock:
            if self._ended:
                return
            self._ended = True

        def _end():
            self._finish_reason = reason
            self._queue.put_nowait(None)
            for callback in self.on_end:
                callback()

        try:
            self._loop.call_soon_threadsafe(_end)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass
