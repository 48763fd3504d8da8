"""Admission and bookkeeping shared by the HTTP and WebSocket speech routes.

`Synthesizer.submit` turns a client's ask into an engine request, refuses it
with an `ApiError` when it cannot run, and returns an `Utterance`: the engine's
audio stream plus the clock that feeds the latency metrics and the drain.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable

from ..engine import api
from . import errors
from .drain import Drain
from .voice_library import VoiceLibrary

log = logging.getLogger(__name__)


def error_type(exc: BaseException) -> str:
    """Name the engine failure for `ttsfleet_errors_total{type}`, torch-free.

    A request the engine finds it cannot serve only once it runs (its text
    turns out too long) is the client's `invalid_request`, not a server fault:
    the canary and the alerts must not read it as the candidate failing. The
    client's kinds are told apart by type before any message is read, so an
    `InvalidRequest` echoing client text that says "out of memory" stays the
    client's. The engine reports a step's CUDA OOM as an `EngineError` whose
    message carries torch's.
    """
    if isinstance(exc, api.InvalidRequest):
        return "invalid_request"
    if isinstance(exc, api.EngineStopped):
        return "engine_stopped"
    if "OutOfMemoryError" in type(exc).__name__ or "out of memory" in str(exc).lower():
        return "cuda_oom"
    if isinstance(exc, api.EngineError):
        return "engine_error"
    return "internal"


def engine_refusal(exc: api.EngineError) -> errors.ApiError:
    """An admission refusal from `engine.submit` as the client sees it."""
    if isinstance(exc, api.InvalidRequest):
        # The engine's `text` is the speech API's `input`.
        param = "input" if exc.param == "text" else exc.param
        return errors.invalid_request(str(exc), param=param)
    if isinstance(exc, api.QueueFull):
        return errors.queue_full(exc.retry_after_s)
    if isinstance(exc, api.EngineStopped):
        return errors.unavailable("the engine is not accepting work", code="engine_stopped")
    return errors.internal(str(exc), code="engine_error")


def generation_failure(exc: BaseException) -> errors.ApiError:
    """A failure while generating, before any audio reached the client."""
    if isinstance(exc, errors.ApiError):
        return exc
    kind = error_type(exc)
    if kind == "invalid_request":  # e.g. a streamed text grew too long
        return engine_refusal(exc)
    if kind == "cuda_oom":
        # Load-dependent: another pod (or this one, later) can serve it.
        return errors.unavailable("out of GPU memory; retry", code="cuda_oom", retry_after_s=1.0)
    if kind == "engine_stopped":
        return errors.unavailable("the engine stopped", code="engine_stopped")
    return errors.internal("generation failed", code=kind)


@dataclasses.dataclass
class Utterance:
    """One engine stream being consumed, and its timings."""

    stream: api.AudioStream
    received_at: float  # time.monotonic() when the request arrived
    sample_rate: int
    metrics: object
    drain: Drain
    on_first_audio: Callable[[float], None] | None = None  # told the TTFA at the first chunk
    first_audio_at: float | None = None
    admitted_at: float | None = None
    last_audio_at: float | None = None
    audio_s: float = 0.0
    _done: bool = False
    _cancelled: bool = False

    async def chunks(self) -> AsyncIterator[api.AudioChunk]:
        """The stream's chunks; raises when the engine ended it by failing.

        The engine's stream never raises: a failed one ends with finish_reason
        "error" (its cause on `.error`) or "shutdown"; that must not look like
        a complete utterance.
        """
        async for chunk in self.stream:
            now = time.monotonic()
            if self.first_audio_at is None:
                self.first_audio_at = now
                self.admitted_at = chunk.t_admitted
                if self.on_first_audio is not None:
                    self.on_first_audio(now - self.received_at)
            self.last_audio_at = now
            self.audio_s += chunk.duration_s
            yield chunk
        reason = self.stream.finish_reason
        if reason == "error":
            # The engine's cause (a CUDA OOM, text it refuses) decides the status.
            cause = getattr(self.stream, "error", None)
            if isinstance(cause, api.EngineError):
                raise cause
            raise api.EngineError("the engine failed while generating")
        if reason == "shutdown":
            raise api.EngineStopped("the engine stopped before the utterance ended")

    def cancel(self) -> None:
        """Stop the generation (frees its batch slot); once, however often called."""
        if not self._cancelled:
            self._cancelled = True
            self.stream.cancel()

    @property
    def finished(self) -> bool:
        """Whether `finish` has recorded this utterance."""
        return self._done

    @property
    def finish_reason(self) -> str | None:
        """Why a complete utterance ended, in the words of OpenAI-style APIs: "stop" (the
        model said all of its text) or "length" (`--max-audio-seconds`, or the model's
        context, cut it first: text it was given went unsaid). None while it runs and
        after a failure (which raises from `chunks` instead)."""
        return {"eos": "stop", "length": "length"}.get(self.stream.finish_reason)

    @property
    def ttfa_s(self) -> float | None:
        return None if self.first_audio_at is None else self.first_audio_at - self.received_at

    @property
    def queue_s(self) -> float | None:
        return None if self.admitted_at is None else max(0.0, self.admitted_at - self.received_at)

    def server_timing(self) -> str:
        """A `Server-Timing` header value (durations in ms) with what is known."""
        parts = []
        if self.queue_s is not None:
            parts.append(f"queue;dur={self.queue_s * 1000:.1f}")
        if self.ttfa_s is not None:
            parts.append(f"ttfa;dur={self.ttfa_s * 1000:.1f}")
        if self.last_audio_at is not None and self._done:
            parts.append(f"total;dur={(self.last_audio_at - self.received_at) * 1000:.1f}")
        return ", ".join(parts)

    def finish(self, completed: bool) -> None:
        """Record metrics once; `completed` is False when cut short (cancel, error)."""
        if self._done:
            return
        self._done = True
        self.stream.release()
        self.drain.release()
        m = self.metrics
        m.audio_seconds.inc(self.audio_s)
        if self.ttfa_s is not None:
            m.ttfa.observe(self.ttfa_s)
        if completed and self.last_audio_at is not None:
            elapsed = self.last_audio_at - self.received_at
            m.duration.observe(elapsed)
            if self.audio_s > 0:
                m.rtf.observe(elapsed / self.audio_s)


@dataclasses.dataclass(frozen=True)
class SpeakingVoice:
    """Whose voice an utterance has: a built-in speaker, a clone, or the model's choice."""

    speaker: str | None = None
    cloned: api.ClonedVoice | None = None


class Synthesizer:
    def __init__(
        self,
        engine: api.Engine,
        metrics,
        drain: Drain,
        voices: VoiceLibrary | None,
        max_input_chars: int,
        max_audio_seconds: float,
        stream_buffer_s: float | None = None,
        on_first_audio: Callable[[float], None] | None = None,
    ):
        self.engine = engine
        # Told each interactive request's time to first audio as it happens (the batch
        # worker's pacing, server/batch/pacing.py).
        self.on_first_audio = on_first_audio
        self.metrics = metrics
        self.drain = drain
        self.voices = voices
        self.max_input_chars = max_input_chars
        self.max_frames = max(1, math.ceil(max_audio_seconds * engine.info.frame_rate_hz))
        # Audio a stream may leave waiting for its client before its generation
        # pauses (--stream-buffer-seconds; engine/stream.py says how).
        self.stream_buffer_s = stream_buffer_s
        self._speakers = {s.lower(): s for s in engine.info.speakers}

    async def speaking_voice(
        self, voice: str | None, caller: str, one_shot: api.ClonedVoice | None = None
    ) -> SpeakingVoice:
        """The voice to speak with: a one-shot clone, the caller's stored voice (Base
        models), or a canonical built-in speaker; a 400 on `voice` saying why not."""
        info = self.engine.info
        if one_shot is not None:
            return SpeakingVoice(cloned=one_shot)
        if info.supports_voice_clone:
            return SpeakingVoice(cloned=await self._stored_voice(voice, caller))
        if voice is None:
            return SpeakingVoice()
        if not self._speakers:
            # VoiceDesign: the instructions describe the voice; OpenAI clients
            # must still send some `voice`, so it is ignored rather than refused.
            return SpeakingVoice()
        if voice.lower() in self._speakers:
            return SpeakingVoice(speaker=self._speakers[voice.lower()])
        if voice.startswith("voice_"):
            raise errors.invalid_request(
                f"model {info.name} cannot speak uploaded voices; use a Base model", param="voice"
            )
        known = ", ".join(info.speakers) or "none"
        raise errors.invalid_request(
            f"unknown voice {voice!r}; built-in voices: {known}", param="voice"
        )

    async def _stored_voice(self, voice: str | None, caller: str) -> api.ClonedVoice:
        name = self.engine.info.name
        if voice is None or not voice.startswith("voice_"):
            given = "no voice" if voice is None else f"unknown voice {voice!r}"
            raise errors.invalid_request(
                f"{given}: model {name} speaks cloned voices only; give `voice` as an uploaded "
                "voice id (POST /v1/audio/voices) or a reference in `voice_clone`",
                param="voice",
            )
        if self.voices is None:
            raise errors.invalid_request(
                "voice uploads are not enabled on this server; use `voice_clone`", param="voice"
            )
        try:
            cloned = await self.voices.cloned_voice(voice, caller)
        except errors.ApiError as exc:
            if exc.status != 404:
                raise
            raise errors.invalid_request(f"unknown voice {voice!r}", param="voice") from None
        if cloned.model != name:
            raise errors.invalid_request(
                f"voice {voice!r} was cloned for model {cloned.model}, not {name}; upload it again",
                param="voice",
            )
        return cloned

    def build_request(
        self,
        *,
        text,
        voice: SpeakingVoice,
        instructions: str | None,
        language: str,
        sampling: dict,
        request_id: str,
        sample_format: api.SampleFormat,
        timestamps: bool = False,
    ) -> api.SynthesisRequest:
        if isinstance(text, str) and len(text) > self.max_input_chars:
            raise errors.invalid_request(
                f"input is longer than {self.max_input_chars} characters", param="input"
            )
        params = api.SamplingParams(**sampling, max_frames=self.max_frames)
        try:
            params.validate()
        except api.InvalidRequest as exc:
            raise errors.invalid_request(str(exc), param=exc.param) from None
        return api.SynthesisRequest(
            text=text,
            voice=voice.speaker,
            cloned_voice=voice.cloned,
            instructions=instructions,
            language=language,
            params=params,
            request_id=request_id,
            buffer_s=self.stream_buffer_s,
            sample_format=sample_format,
            timestamps=timestamps,
        )

    def submit(self, request: api.SynthesisRequest, received_at: float) -> Utterance:
        if self.drain.draining:
            raise errors.unavailable(
                "this server is shutting down; retry on another", code="draining"
            )
        try:
            stream = self.engine.submit(request)
        except api.EngineError as exc:
            raise engine_refusal(exc) from None
        self.drain.acquire()
        return Utterance(
            stream=stream,
            received_at=received_at,
            sample_rate=self.engine.info.sample_rate,
            metrics=self.metrics,
            drain=self.drain,
            # A streamed text's first audio waits for its text too: not the engine's time.
            on_first_audio=self.on_first_audio if isinstance(request.text, str) else None,
        )
