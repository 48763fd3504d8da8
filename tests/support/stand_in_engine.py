"""TEMPORARY stand-in for the real engine, implementing engine/api.py.

Used (1) while `ttsfleet_runtime.engine.tts_engine` has not landed and (2)
afterwards only where the real tiny CPU engine cannot produce a situation on
demand (a CUDA out-of-memory error in the middle of generation). It makes a
deterministic tone: one chunk per `frame_s`, `frames_per_chunk` codec frames of
1920 samples each, `frames` frames in all (or `frames_per_char` per character).

For a "Base" variant it clones deterministically (`clone_voice`: the speaker
embedding is a digest of the recording, the reference codes one row per 80 ms of
it) and speaks a cloned voice at a pitch set by its embedding, so a test hears
which voice reached the engine. The real encoders are the engine's to test.

It keeps the real engine's stream contract (engine/stream.py): iterating never
raises; a failed generation ends with finish_reason "error" and `.error` says
why (an `EngineError`, the original failure in its message), or is None when
unknown (a "quiet" failure, as when the real codec worker fails a stream).
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import numpy as np

from ttsfleet_runtime.engine import api

SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920
EMBEDDING_SIZE = 16
CODE_GROUPS = 16


def pitch_hz(request: api.SynthesisRequest) -> float:
    """The tone's pitch: 220 Hz, or for a cloned voice 150-350 Hz by its embedding."""
    if request.cloned_voice is None:
        return 220.0
    return 150.0 + 200.0 * float(request.cloned_voice.speaker_embedding[0])


class CudaOutOfMemory(RuntimeError):
    """Named like torch.cuda.OutOfMemoryError; torch is not needed to raise it."""


CudaOutOfMemory.__name__ = "OutOfMemoryError"


class _Stream:
    """Generation runs in its own task (as in a real engine), into a queue;
    `cancel()` stops it and frees the slot whether or not anyone iterates."""

    def __init__(self, engine: StandInEngine, request: api.SynthesisRequest):
        self.engine = engine
        self.request = request
        self.request_id = request.request_id
        self._chunks: asyncio.Queue = asyncio.Queue()
        self._finish: api.FinishReason | None = None
        self._error: api.EngineError | None = None
        self.pitch_hz = pitch_hz(request)
        self._task = asyncio.get_running_loop().create_task(self._generate())

    @property
    def finish_reason(self):
        return self._finish

    @property
    def error(self) -> api.EngineError | None:
        return self._error if self._finish == "error" else None

    def cancel(self) -> None:
        if self._task.cancel():
            self._finish = self._finish or "cancelled"

    def release(self) -> None:
        self.cancel()

    async def _text(self) -> str:
        if isinstance(self.request.text, str):
            return self.request.text
        return "".join([t async for t in self.request.text])

    async def _generate(self):
        engine = self.engine
        queued = True
        try:
            async with engine._slots:
                engine._queued -= 1
                queued = False
                engine._active += 1
                try:
                    t_admitted = time.monotonic()
                    text = await self._text()
                    frames = engine.frames or max(1, len(text) * engine.frames_per_char)
                    index = done = 0
                    while done < frames:
                        await asyncio.sleep(engine.frame_s)
                        if engine._stopping_now:
                            self._finish = "shutdown"
                            return
                        if (
                            engine.fail_after_chunks is not None
                            and index >= engine.fail_after_chunks
                        ):
                            if engine.fail_quietly:
                                self._finish = "error"
                                return
                            raise engine.fail_with or CudaOutOfMemory(
                                "CUDA out of memory. Tried to allocate 2.00 GiB"
                            )
                        n = min(engine.frames_per_chunk, frames - done)
                        t = (
                            np.arange(n * SAMPLES_PER_FRAME) + done * SAMPLES_PER_FRAME
                        ) / SAMPLE_RATE
                        pcm = (0.3 * np.sin(2 * np.pi * self.pitch_hz * t)).astype(np.float32)
                        if self.request.sample_format == "s16":  # as the codec worker gives it
                            pcm = np.frombuffer(api.to_s16le(pcm), "<i2").astype(np.int16)
                        done += n
                        engine._frames_total += n
                        self._chunks.put_nowait(
                            api.AudioChunk(pcm, SAMPLE_RATE, index, n, t_admitted, time.monotonic())
                        )
                        index += 1
                    self._finish = "eos"
                finally:
                    engine._active -= 1
        except asyncio.CancelledError:
            self._finish = "cancelled"
        except Exception as exc:
            # As engine_core does: the stream ends, the cause rides on `.error`.
            self._finish = "error"
            self._error = (
                exc
                if isinstance(exc, api.EngineError)
                else api.EngineError(f"generation failed: {exc}")
            )
        finally:
            if queued:
                engine._queued -= 1
            self._chunks.put_nowait(None)

    async def __aiter__(self):
        while (item := await self._chunks.get()) is not None:
            yield item


class StandInEngine:
    def __init__(
        self,
        *,
        max_batch: int = 4,
        max_queue: int = 8,
        frame_s: float = 0.01,
        frames: int = 0,
        frames_per_char: int = 1,
        frames_per_chunk: int = 2,
        fail_after_chunks: int | None = None,
        fail_quietly: bool = False,
        fail_with: Exception | None = None,
        variant: str = "CustomVoice",
    ):
        self.info = api.ModelInfo(
            name="stand-in-tiny-" + variant,
            size="tiny",
            variant=variant,
            tokenizer_rate_hz=12,
            sample_rate=SAMPLE_RATE,
            frame_rate_hz=SAMPLE_RATE / SAMPLES_PER_FRAME,
            samples_per_frame=SAMPLES_PER_FRAME,
            speakers=("Vivian", "Ryan") if variant == "CustomVoice" else (),
            languages=("auto", "english", "chinese"),
            supports_instructions=True,
            supports_voice_clone=variant == "Base",
        )
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.frame_s = frame_s
        self.frames = frames
        self.frames_per_char = frames_per_char
        self.frames_per_chunk = frames_per_chunk
        self.fail_after_chunks = fail_after_chunks
        # Quietly: end the stream with finish_reason "error" and no `.error`
        # (the cause unknown, as when the real codec worker fails a stream).
        self.fail_quietly = fail_quietly
        # What a failure that says why raises inside generation (default: CUDA
        # out of memory); the stream carries it as `.error`.
        self.fail_with = fail_with
        self.clones = 0  # clone_voice calls: speaking a stored voice must not add any
        self._ready = False
        self._stopped = False
        self._stopping_now = False
        self._queued = 0
        self._active = 0
        self._frames_total = 0
        self._slots: asyncio.Semaphore | None = None

    @property
    def ready(self) -> bool:
        return self._ready and not self._stopped

    async def start(self) -> None:
        self._slots = asyncio.Semaphore(self.max_batch)
        self._ready = True

    def clone_voice(self, audio: np.ndarray, sample_rate: int, transcript: str | None):
        if not self.info.supports_voice_clone:
            raise api.InvalidRequest(f"model {self.info.name} cannot clone voices")
        self.clones += 1
        digest = hashlib.sha256(np.asarray(audio, np.float32).tobytes()).digest()
        embedding = np.frombuffer(digest[:EMBEDDING_SIZE], np.uint8).astype(np.float32) / 255
        frames = max(1, len(audio) * 25 // (2 * sample_rate))  # 12.5 codec frames a second
        codes = np.arange(frames * CODE_GROUPS, dtype=np.int64).reshape(frames, CODE_GROUPS)
        return api.ClonedVoice(
            speaker_embedding=embedding,
            ref_codes=codes % 2048 if transcript else None,
            ref_text=transcript or None,
            model=self.info.name,
        )

    def submit(self, request: api.SynthesisRequest):
        if self._stopped:
            raise api.EngineStopped("stopped")
        if self.info.supports_voice_clone and request.cloned_voice is None:
            raise api.InvalidRequest("a Base model needs a cloned voice", param="cloned_voice")
        if not self.info.supports_voice_clone and request.cloned_voice is not None:
            raise api.InvalidRequest(f"{self.info.name} cannot clone", param="cloned_voice")
        if request.voice is not None and request.voice not in self.info.speakers:
            raise api.InvalidRequest(f"unknown voice {request.voice!r}")
        request.params.validate()
        if self._queued + self._active >= self.max_batch + self.max_queue:
            raise api.QueueFull("queue full", retry_after_s=2.0)
        self._queued += 1
        return _Stream(self, request)

    def stats(self) -> api.EngineStats:
        return api.EngineStats(
            queue_depth=max(0, self._queued),
            active=self._active,
            max_batch=self.max_batch,
            max_queue=self.max_queue,
            frames_total=self._frames_total,
        )

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        self._stopped = True
        deadline = time.monotonic() + drain_timeout_s
        while self._active and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._stopping_now = True
