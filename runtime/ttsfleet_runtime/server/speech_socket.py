"""`/v1/audio/speech/stream`: text in as it is written, audio out as it is made.

For an LLM's tokens: the client sends text deltas, the engine starts speaking
before the sentence is complete, audio comes back chunk by chunk.

Protocol (JSON text frames unless said otherwise):

  auth:    `Authorization: Bearer <key>` on the upgrade request, or (browsers,
           which cannot set headers on WebSockets) `?api_key=<key>` in the URL.
  client:  {"type": "session.config", "model"?, "voice"?, "instructions"?,
            "language"?, "temperature"?, ... the sampling fields of /v1/audio/speech}
  server:  {"type": "session.ready", "request_id", "sample_rate", "audio_format": "pcm_s16le"}
  client:  {"type": "text.delta", "text": "..."}       any number
  client:  {"type": "flush"}   ends the current utterance: everything sent so far
                               is spoken; later deltas start the next utterance
  client:  {"type": "end"}     flush, then close once the last audio is sent
  server:  {"type": "audio", "utterance": k, "index": i, "samples": n,
            "t_ms": ms since the utterance was submitted}
           immediately followed by one binary frame: n samples of s16le mono PCM
  server:  {"type": "utterance.done", "utterance": k, "audio_seconds", "ttfa_ms", "total_ms"}
  server:  {"type": "session.done", "utterances": count}, then close 1000
  errors:  {"type": "error", "code", "message", "retry_after_s"?}, then close:
           1008 invalid_api_key / invalid_request / protocol_error / rate_limited,
           1013 (try again later) queue_full / draining / engine_stopped / cuda_oom,
           1011 internal.
Utterances are spoken one after another, in order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import Field, ValidationError

from . import audio_encoding, errors
from .http_guard import request_id_from
from .speech_request import SamplingFields
from .synthesis import error_type, generation_failure

log = logging.getLogger(__name__)
router = APIRouter()

ROUTE = "/v1/audio/speech/stream"
_RETRY_LATER = {"queue_full", "draining", "engine_stopped", "cuda_oom"}


class SessionConfig(SamplingFields):
    type: str = Field(pattern="^session\\.config$")
    model: str | None = None
    voice: str | None = Field(default=None, max_length=256)
    instructions: str | None = Field(default=None, max_length=4096)
    language: str = Field(default="auto", min_length=1, max_length=32)


def _close_code(code: str) -> int:
    if code in _RETRY_LATER:
        return 1013
    if code in ("internal", "engine_error"):
        return 1011
    return 1008


class _Session:
    def __init__(self, ws: WebSocket, runtime, request_id: str):
        self.ws = ws
        self.runtime = runtime
        self.request_id = request_id
        self.caller = "anonymous"
        self.config: SessionConfig | None = None
        self.utterances: asyncio.Queue = asyncio.Queue()
        self.chars = 0
        self.count = 0

    async def send_error(self, error: errors.ApiError) -> None:
        self.runtime.metrics.errors.labels(type=error.code).inc()
        message = {"type": "error", "code": error.code, "message": error.message}
        if error.retry_after_s is not None:
            message["retry_after_s"] = error.retry_after_s
        try:
            await self.ws.send_json(message)
            await self.ws.close(_close_code(error.code))
        except Exception:  # the client may be gone already
            pass

    def count_request(self, status: int) -> None:
        self.runtime.metrics.requests.labels(route=ROUTE, code=str(status)).inc()

    async def open(self) -> None:
        """Authenticate, read the config, say ready; raise ApiError to refuse."""
        ws, runtime = self.ws, self.runtime
        header = ws.headers.get("authorization")
        if header or runtime.api_keys.disabled:
            self.caller = runtime.api_keys.authenticate(header)
        else:
            self.caller = runtime.api_keys.authenticate_key(ws.query_params.get("api_key", ""))
        try:
            raw = await asyncio.wait_for(ws.receive_text(), runtime.settings.ws_config_timeout_s)
        except asyncio.TimeoutError:
            raise errors.ApiError(400, "no session.config message in time", code="protocol_error") from None
        try:
            self.config = SessionConfig.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "message"
            raise errors.invalid_request(f"session.config: {where}: {first['msg']}", param=where) from None
        if self.config.model is not None and self.config.model not in runtime.served_models:
            raise errors.ApiError(404, f"model {self.config.model!r} is not served here", code="model_not_found")
        if runtime.drain.draining:
            raise errors.unavailable("this server is shutting down; retry on another", code="draining")
        # Validate voice and sampling once, before any text arrives.
        self._build_request(text="")
        await ws.send_json(
            {
                "type": "session.ready",
                "request_id": self.request_id,
                "sample_rate": runtime.engine.info.sample_rate,
                "audio_format": "pcm_s16le",
            }
        )

    def _build_request(self, text):
        c = self.config
        return self.runtime.synthesizer.build_request(
            text=text,
            voice=c.voice,
            instructions=c.instructions,
            language=c.language,
            sampling=c.sampling_overrides(),
            request_id=f"{self.request_id}.{self.count}",
            caller=self.caller,
        )

    async def read(self) -> None:
        """Client messages -> per-utterance text queues, until `end`."""
        current: asyncio.Queue | None = None
        max_chars = self.runtime.settings.max_input_chars
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            if message.get("text") is None:
                raise errors.ApiError(400, "binary frames are not part of this protocol", code="protocol_error")
            try:
                event = json.loads(message["text"])
                kind = event["type"]
            except (ValueError, KeyError, TypeError):
                raise errors.ApiError(400, "each message must be a JSON object with a 'type'", code="protocol_error") from None
            if kind == "text.delta":
                text = event.get("text")
                if not isinstance(text, str):
                    raise errors.ApiError(400, "text.delta needs a string 'text'", code="protocol_error")
                self.chars += len(text)
                if self.chars > max_chars:
                    raise errors.invalid_request(f"more than {max_chars} characters of text in one session", param="text")
                if current is None:
                    current = asyncio.Queue()
                    await self.utterances.put(current)
                current.put_nowait(text)
            elif kind in ("flush", "end"):
                if current is not None:
                    current.put_nowait(None)
                    current = None
                if kind == "end":
                    await self.utterances.put(None)
                    return
            else:
                raise errors.ApiError(400, f"unknown message type {kind!r}", code="protocol_error")

    async def speak(self) -> None:
        """Utterances in order -> engine -> audio frames to the client."""
        while (texts := await self.utterances.get()) is not None:
            wait_s = self.runtime.limiter.take(self.caller)
            if wait_s > 0:
                raise errors.rate_limited(wait_s)

            async def deltas(texts=texts):
                while (text := await texts.get()) is not None:
                    yield text

            submitted = time.monotonic()
            utterance = self.runtime.synthesizer.submit(self._build_request(deltas()), submitted)
            completed = False
            try:
                index = 0
                async for chunk in utterance.chunks():
                    pcm = audio_encoding.to_s16le(chunk.pcm)
                    await self.ws.send_json(
                        {
                            "type": "audio",
                            "utterance": self.count,
                            "index": index,
                            "samples": len(chunk.pcm),
                            "t_ms": round((time.monotonic() - submitted) * 1000, 1),
                        }
                    )
                    await self.ws.send_bytes(pcm)
                    index += 1
                completed = True
            except (WebSocketDisconnect, asyncio.CancelledError):
                utterance.cancel()
                raise
            except errors.ApiError:
                utterance.cancel()
                raise
            except Exception as exc:
                utterance.cancel()
                if isinstance(exc, RuntimeError) and "websocket" in str(exc).lower():
                    raise WebSocketDisconnect(1006) from None  # send after the client left
                log.error("generation failed", exc_info=exc, extra={"request_id": self.request_id, "type": error_type(exc)})
                raise generation_failure(exc) from None
            finally:
                utterance.finish(completed=completed)
            self.count_request(200)
            await self.ws.send_json(
                {
                    "type": "utterance.done",
                    "utterance": self.count,
                    "audio_seconds": round(utterance.audio_s, 3),
                    "ttfa_ms": None if utterance.ttfa_s is None else round(utterance.ttfa_s * 1000, 1),
                    "total_ms": round((time.monotonic() - submitted) * 1000, 1),
                }
            )
            self.count += 1


@router.websocket(ROUTE)
async def speech_stream(ws: WebSocket):
    runtime = ws.app.state.runtime
    session = _Session(ws, runtime, request_id_from(dict(ws.scope["headers"])))
    await ws.accept()
    tasks: list[asyncio.Task] = []
    try:
        await session.open()
        speaker = asyncio.create_task(session.speak())
        reader = asyncio.create_task(session.read())
        tasks += [speaker, reader]
        # Whichever fails first ends the session; the reader finishing (`end`)
        # leaves the speaker to say the rest.
        done, _ = await asyncio.wait({speaker, reader}, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
        if not speaker.done():
            await speaker
            speaker.result()
        await ws.send_json({"type": "session.done", "utterances": session.count})
        await ws.close(1000)
    except WebSocketDisconnect:
        runtime.metrics.errors.labels(type="client_disconnect").inc()
        session.count_request(499)
        log.info("websocket client left", extra={"request_id": session.request_id})
    except errors.ApiError as error:
        session.count_request(error.status)
        await session.send_error(error)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
                try:
                    await task
                except BaseException:
                    pass
