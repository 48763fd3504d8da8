"""`POST /v1/audio/speech`: OpenAI's speech endpoint over the engine.

Three shapes of response, chosen by `stream_format`:
- "audio" (the default, as in OpenAI's API): the file's bytes as each chunk is
  generated (chunked HTTP); a wav starts with a header of "unknown" sizes;
- "sse": `data: {"type": "speech.audio.delta", "audio": <base64>}` events, then
  `speech.audio.done`;
- "file": one complete file (exact headers, Content-Length) once all audio is
  made. flac cannot be streamed, so it is always a file unless "sse"/"audio"
  is asked for (400).
A request meant to be reproducible (a seed, or `cache: true`) is answered from the
response cache when it is there (cached_speech.py: no engine slot, same headers and
shape), and a miss is stored once its whole response was sent.
The voice is a built-in speaker, a stored voice id (Base models), or a
reference recording in `voice_clone` cloned for this request only (one-shot
cloning: same checks and consent rule as an upload, nothing is kept).
Streamed responses start only when the first chunk exists, so a failure
before any audio still gets a proper status code; `Server-Timing` then carries
the queue wait and time to first audio. A client that goes away cancels the
generation at once (its batch slot is freed) and is counted as status 499; a
generation that fails after the headers is counted with its failure's status.
A client that stops reading holds little: its generation pauses once
`--stream-buffer-seconds` of audio wait for it (engine/stream.py), and after
`--send-timeout` without taking anything its connection is dropped
(http_protocol.py), its generation cancelled, and it is counted as
`send_timeout` (408).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from ..engine import api
from . import audio_encoding, cached_speech, errors
from .auth import ANONYMOUS
from .http_guard import record_error
from .http_protocol import sending_timed_out
from .speech_request import SpeechRequest, VoiceClone
from .synthesis import Utterance, generation_failure
from .voice_library import clone_voice

log = logging.getLogger(__name__)
router = APIRouter()

CLIENT_CLOSED = 499
# A response cut because its client took nothing for the send timeout: the
# status the request would have had if the server had waited for it to finish.
SEND_TIMED_OUT = 408

ERROR_RESPONSES = {
    400: {"description": "Invalid request: the message and `param` say which field and why"},
    401: {"description": "Missing or invalid API key"},
    404: {"description": "Unknown model"},
    413: {"description": "Request body too large"},
    429: {"description": "Rate limit or queue full; see Retry-After"},
    503: {"description": "Draining or engine unavailable; see Retry-After"},
}


class ClientGone(Exception):
    """The client left before its response started; the app answers it 499 (nobody
    reads it) once `awaited` has cancelled and counted its utterance."""


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that always closes its body generator, then runs `on_close`.

    Starlette stops iterating when the client disconnects but leaves the
    generator suspended at its `yield`; closing it runs its cleanup (cancel
    the generation, free the slot) now rather than at garbage collection.
    A client gone before the body started is different: Starlette cancels the
    response before the generator runs, and closing a never-started generator
    runs none of its code, so `on_close` does that bookkeeping.
    """

    def __init__(self, content, *, on_close, **kwargs):
        super().__init__(content, **kwargs)
        self.on_close = on_close

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self.body_iterator.aclose()
            finally:
                self.on_close()


async def _until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work):
    """Await `work` unless the client leaves first (then raise ClientGone)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    raise ClientGone()


async def awaited(request: Request, utterance: Utterance, work):
    """`work` (the utterance's first chunk, or all of it) awaited before the response
    starts. The client leaving first cancels the utterance and raises ClientGone; a
    failure finishes it and raises the ApiError the client is told."""
    try:
        return await unless_disconnected(request, work)
    except ClientGone:
        cancel_unfinished(request, utterance)
        log.info(
            "client disconnected, generation cancelled",
            extra={"request_id": request.state.request_id},
        )
        raise
    except Exception as exc:
        utterance.finish(completed=False)
        raise failed(exc, request.scope["state"]) from None


def cancel_unfinished(request: Request, utterance: Utterance) -> None:
    """A client that left an unfinished utterance: cancel it (its slot is freed) and count it.
    A streamed response's `on_close`: its body did this unless it never started."""
    if utterance.finished:
        return
    utterance.cancel()
    utterance.finish(completed=False)
    count_client_gone(request)


def count_client_gone(request: Request) -> None:
    state = request.scope["state"]
    runtime = request.app.state.runtime
    if sending_timed_out(request.scope):
        record_error(state, runtime.metrics, "send_timeout")
        state["final_status"] = SEND_TIMED_OUT
        log.warning(
            "the client took no audio for the send timeout; connection dropped, "
            "generation cancelled",
            extra={
                "request_id": state["request_id"],
                "send_timeout_s": runtime.settings.send_timeout_s,
            },
        )
        return
    record_error(state, runtime.metrics, "client_disconnect")
    state["final_status"] = CLIENT_CLOSED


def stream_format(body: SpeechRequest) -> str:
    """What the client gets: streamed audio unless it asked otherwise or the format cannot stream."""
    if body.stream_format is not None:
        return body.stream_format
    return "audio" if body.response_format in audio_encoding.STREAMABLE else "file"


def check_request(body: SpeechRequest, runtime, streamed: bool | None = None) -> None:
    """Refuse what this server cannot serve; `streamed`: whether the audio is sent as
    it is made (by default what `stream_format` says)."""
    if body.model not in runtime.served_models:
        raise errors.ApiError(
            404,
            f"model {body.model!r} is not served here; use {runtime.served_models[0]!r}",
            code="model_not_found",
            param="model",
        )
    if body.speed != 1.0:
        raise errors.invalid_request(
            "speed other than 1.0 is not supported by this model", param="speed"
        )
    if body.response_format not in runtime.formats:
        raise errors.invalid_request(
            f"response_format {body.response_format!r} is not available; use one of {', '.join(runtime.formats)}",
            param="response_format",
        )
    if streamed is None:
        streamed = stream_format(body) != "file"
    if streamed and body.response_format not in audio_encoding.STREAMABLE:
        raise errors.invalid_request(
            f"{body.response_format} cannot be streamed; stream one of {', '.join(audio_encoding.STREAMABLE)} "
            "or ask for stream_format 'file'",
            param="response_format",
        )


@router.post(
    "/v1/audio/speech",
    response_class=Response,
    responses={
        200: {
            "content": {t: {} for t in audio_encoding.CONTENT_TYPES.values()},
            "description": "Audio",
        },
        **ERROR_RESPONSES,
    },
    summary="Synthesise speech (OpenAI-compatible)",
)
async def create_speech(body: SpeechRequest, request: Request):
    runtime = request.app.state.runtime
    state = request.scope["state"]
    check_request(body, runtime)
    prepared = await prepare_speech(body, request)
    cached = await cached_speech.look_up(
        runtime, body, prepared.request, prepared.stored_voice, prepared.tenant
    )
    if cached is not None and cached.hit is not None:
        return cached_speech.answer_hit(runtime, cached, stream_format(body), state["received_at"])
    utterance = runtime.synthesizer.submit(prepared.request, state["received_at"])
    return await respond(body, request, utterance, cached)


@dataclasses.dataclass(frozen=True)
class PreparedSpeech:
    """A speech body made into the engine's request, before admission."""

    request: api.SynthesisRequest
    tenant: str
    # The stored voice it speaks with, whose cached audio is erased with it (a one-shot
    # clone is keyed by its prompt instead; a built-in speaker by its name).
    stored_voice: str | None


async def submit_speech(body: SpeechRequest, request: Request, timestamps: bool = False):
    """The request's voice resolved and its utterance admitted (an `Utterance`)."""
    prepared = await prepare_speech(body, request, timestamps)
    received_at = request.scope["state"]["received_at"]
    return request.app.state.runtime.synthesizer.submit(prepared.request, received_at)


async def prepare_speech(
    body: SpeechRequest, request: Request, timestamps: bool = False
) -> PreparedSpeech:
    """The request's voice resolved (a one-shot clone cloned) and its engine request."""
    runtime = request.app.state.runtime
    state = request.scope["state"]
    one_shot = None
    if body.voice_clone is not None:
        one_shot = await _one_shot_clone(body.voice_clone, request)
    tenant = state.get("caller", ANONYMOUS)
    voice = await runtime.synthesizer.speaking_voice(body.voice, tenant, one_shot)
    synthesis_request = runtime.synthesizer.build_request(
        text=body.input,
        voice=voice,
        instructions=body.instructions,
        language=body.language,
        sampling=body.sampling_overrides(),
        request_id=state["request_id"],
        sample_format=audio_encoding.sample_format(body.response_format),
        timestamps=timestamps,
    )
    stored_voice = body.voice if voice.cloned is not None and one_shot is None else None
    return PreparedSpeech(synthesis_request, tenant, stored_voice)


async def respond(body: SpeechRequest, request: Request, utterance, cached=None):
    """The speech endpoint's response for an admitted `utterance`; with `cached` (the
    response cache's look-up that missed) the whole response is stored once sent."""
    runtime = request.app.state.runtime
    headers = {
        "X-Audio-Sample-Rate": str(utterance.sample_rate),
        **cached_speech.cache_header(runtime, cached),
    }
    chunks = utterance.chunks()
    shape = stream_format(body)
    fill = None
    if cached is not None:
        content_type = audio_encoding.CONTENT_TYPES[body.response_format]
        fill = cached_speech.CacheFill(
            runtime.response_cache, cached.key, content_type, utterance.sample_rate
        )

    if shape == "file":
        pcm = await awaited(request, utterance, collect(chunks))
        utterance.finish(completed=True)
        data = audio_encoding.encode_file(pcm, utterance.sample_rate, body.response_format)
        if fill is not None:
            fill.add(data, 0)
            fill.complete(utterance.audio_s)
        headers["Server-Timing"] = utterance.server_timing()
        headers["X-Audio-Duration"] = f"{utterance.audio_s:.3f}"
        return Response(
            data, media_type=audio_encoding.CONTENT_TYPES[body.response_format], headers=headers
        )

    first = await awaited(request, utterance, anext(chunks, None))
    headers["Server-Timing"] = utterance.server_timing()
    encoder = audio_encoding.StreamEncoder(body.response_format, utterance.sample_rate)
    if shape == "audio":
        body_iter = _audio_bytes(first, chunks, encoder, utterance, request, fill)
        media_type = encoder.content_type
    else:
        body_iter = _sse_events(first, chunks, encoder, utterance, request, fill)
        media_type = "text/event-stream"
        headers["Cache-Control"] = "no-cache"

    return ClosingStreamingResponse(
        body_iter,
        media_type=media_type,
        headers=headers,
        on_close=lambda: cancel_unfinished(request, utterance),
    )


async def _one_shot_clone(clone: VoiceClone, request: Request) -> api.ClonedVoice:
    """The request's own reference, checked like an upload and cloned; never stored."""
    runtime = request.app.state.runtime
    info = runtime.engine.info
    if not info.supports_voice_clone:
        raise errors.invalid_request(
            f"model {info.name} cannot clone voices; use a Base model", param="voice_clone"
        )
    if not clone.consent:
        raise errors.invalid_request(
            "consent must be true: clone only voices whose speaker consented",
            param="voice_clone.consent",
        )
    try:
        data = base64.b64decode(clone.audio, validate=True)
    except binascii.Error:
        raise errors.invalid_request(
            "audio is not valid base64", param="voice_clone.audio"
        ) from None
    if len(data) > runtime.settings.max_voice_upload_bytes:
        raise errors.body_too_large(runtime.settings.max_voice_upload_bytes)
    try:
        pcm = await request.app.state.reference_decoder.decode(data)
    except errors.ApiError as exc:
        if exc.param == "audio":
            exc.param = "voice_clone.audio"
        raise
    return await clone_voice(
        runtime.engine,
        runtime.metrics,
        pcm,
        clone.transcript,
        source="request",
        fields="voice_clone.",
    )


async def collect(chunks) -> np.ndarray:
    parts = [chunk.pcm async for chunk in chunks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def failed(exc: BaseException, state: dict) -> errors.ApiError:
    """What the client is told; a failure that is not a plain refusal is logged once here."""
    failure = generation_failure(exc)
    if not isinstance(exc, errors.ApiError) and failure.status >= 500:
        log.error(
            "generation failed",
            exc_info=exc,
            extra={"request_id": state["request_id"], "type": failure.code},
        )
    return failure


async def encoded(first, chunks, encoder, utterance: Utterance, request: Request, fill=None):
    """(encoded bytes, chunk) of every chunk, then (the encoder's last bytes, None); the
    bookkeeping of how the stream ended. With `fill` (a cacheable miss) the bytes are
    kept and cached once all were taken."""
    state = request.scope["state"]
    completed = False

    def sent(data: bytes, chunk) -> tuple[bytes, object]:
        if fill is not None:
            fill.add(data, chunk.frames if chunk is not None else 0)
        return data, chunk

    try:
        if first is not None:
            yield sent(encoder.encode(first), first)
            async for chunk in chunks:
                yield sent(encoder.encode(chunk), chunk)
        yield sent(encoder.finish(), None)
        completed = True
        if fill is not None:
            fill.complete(utterance.audio_s)
    except (asyncio.CancelledError, GeneratorExit):
        # Starlette cancels the body when the client disconnects.
        utterance.cancel()
        count_client_gone(request)
        raise
    except Exception as exc:
        # Headers are sent: all that is left is to end the response early,
        # counted with the status the client would have got before them.
        utterance.cancel()
        failure = failed(exc, state)
        record_error(state, request.app.state.runtime.metrics, failure.code)
        state["final_status"] = failure.status
        raise
    finally:
        utterance.finish(completed=completed)


async def _audio_bytes(first, chunks, encoder, utterance, request, fill=None):
    encoded_chunks = encoded(first, chunks, encoder, utterance, request, fill)
    try:
        async for data, _chunk in encoded_chunks:
            if data:
                yield data
    finally:
        await encoded_chunks.aclose()


async def _sse_events(first, chunks, encoder, utterance, request, fill=None):
    frames = 0
    events = encoded(first, chunks, encoder, utterance, request, fill)
    try:
        async for data, chunk in events:
            frames += chunk.frames if chunk is not None else 0
            if data:
                yield sse_event(
                    {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
                )
    except Exception:
        yield sse_event(
            {
                "type": "error",
                "error": {
                    "message": "generation failed",
                    "code": request.scope["state"].get("error"),
                },
            }
        )
        return
    finally:
        await events.aclose()
    # Output tokens are codec frames (one talker token each); input tokens are
    # counted by the engine's tokenizer, which the server does not see.
    usage = {"input_tokens": 0, "output_tokens": frames, "total_tokens": frames}
    yield sse_event(
        {"type": "speech.audio.done", "usage": usage, "audio_seconds": round(utterance.audio_s, 3)}
    )


def sse_event(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()
