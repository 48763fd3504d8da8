"""`/v1/audio/speech/stream`: text in as it is written, audio out as it is made.

For an LLM's tokens: the client sends text deltas, the engine starts speaking
before the sentence is complete, audio comes back chunk by chunk.

Protocol (JSON text frames unless said otherwise):

  auth:    `Authorization: Bearer <key>` on the upgrade request, or (browsers,
           which cannot set headers on WebSockets) `?api_key=<key>` in the URL.
  client:  {"type": "session.config", "model"?, "voice"?, "instructions"?,
            "language"?, "timestamps"?, "temperature"?, ... the sampling fields of
            /v1/audio/speech}
  server:  {"type": "session.ready", "request_id", "sample_rate", "audio_format": "pcm_s16le"}
  client:  {"type": "text.delta", "text": "..."}       any number
  client:  {"type": "flush"}   ends the current utterance: everything sent so far
                               is spoken; later deltas start the next utterance
  client:  {"type": "end"}     flush, then close once the last audio is sent
  server:  {"type": "audio", "utterance": k, "index": i, "samples": n,
            "t_ms": ms since the utterance was submitted}
           immediately followed by one binary frame: n samples of s16le mono PCM
  server:  with "timestamps": true, before a chunk's audio header, the words timed
           with it (usually ahead of the audio that speaks them):
           {"type": "alignment", "utterance": k, "characters", "character_start_times_seconds",
            "character_end_times_seconds", "words": [{"word", "start_time", "end_time"}]},
           seconds from the utterance's first sample (server/timestamp_routes.py's
           fields; engine/word_timing.py's rule). Text sent in deltas is timed as the
           whole text would be: a word once its last token is known.
  server:  {"type": "utterance.done", "utterance": k, "audio_seconds", "ttfa_ms", "total_ms",
            "finish_reason": "stop" | "length"}   "length": the `--max-audio-seconds`
           cap ended it before its text was said; text sent after that, up to the
           next flush, is dropped
  server:  {"type": "session.done", "utterances": count}, then close 1000
  errors:  {"type": "error", "code", "message", "retry_after_s"?}, then close
           (the close reason repeats the message):
           1003 protocol_error for a binary frame (this protocol is JSON text),
           1009 protocol_error for a message over `--max-body-bytes`,
           1008 invalid_api_key / invalid_request / protocol_error / rate_limited /
                idle_timeout,
           1013 (try again later) too_many_sessions / queue_full / draining /
                engine_stopped / cuda_oom,
           1011 internal.
Utterances are spoken one after another, in order.

A session must not hold the pod for nothing (limits in ServerSettings):
- waiting on its client (nothing being spoken, no message) for
  `ws_idle_timeout_s` closes it with `idle_timeout`;
- an utterance left open (text.delta, no flush) that gets no text for
  `ws_text_stall_s` is flushed: the engine says what it has and frees the
  batch slot; later deltas start the next utterance;
- one key holds at most `ws_max_sessions_per_key` sessions at once;
- opening a session spends a token of the key's rate-limit bucket (it pays
  for the first utterance; each further utterance spends one);
- failed authentications count against the client address, as over HTTP;
- a client that stops reading: its utterance's generation pauses once
  `--stream-buffer-seconds` of audio wait for it, and after `--send-timeout`
  without taking anything the connection is dropped (no close frame: it
  could not be delivered) and counted as `send_timeout`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import reprlib
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import Field, ValidationError

from .. import metrics
from . import captions, errors
from .auth import ANONYMOUS
from .http_guard import authenticate, client_address, record_error, request_id_from
from .http_protocol import sending_timed_out
from .speech_request import SamplingFields, Text, utf8_text
from .synthesis import SpeakingVoice, error_type, generation_failure

log = logging.getLogger(__name__)
router = APIRouter()

ROUTE = "/v1/audio/speech/stream"
# Close codes from the error groups of the metrics catalogue: load and lifecycle
# (and a CUDA OOM, which another pod or a later try can serve) say "try again
# later"; the server's other faults say it failed; the client's own say policy.
_RETRY_LATER = frozenset({*metrics.CAPACITY_ERRORS, "cuda_oom", "too_many_sessions"})
_SERVER_FAILED = frozenset(metrics.SERVER_FAULT_ERRORS) - _RETRY_LATER
_UNSUPPORTED_DATA = 1003
_MESSAGE_TOO_BIG = 1009
# A close frame's reason is at most 123 bytes of UTF-8.
_MAX_CLOSE_REASON = 123
_brief = reprlib.Repr()
_brief.maxstring = _brief.maxother = 40
_short = _brief.repr  # a client's value in a message: never all of a 60 kB string


class SessionConfig(SamplingFields):
    type: str = Field(pattern="^session\\.config$")
    model: Text | None = None
    voice: Text | None = Field(default=None, max_length=256)
    instructions: Text | None = Field(default=None, max_length=4096)
    language: Text = Field(default="auto", min_length=1, max_length=32)
    timestamps: bool = Field(
        default=False, description="Send each utterance's word timings (alignment messages)."
    )


def protocol_error(message: str, close_code: int = 1008) -> errors.ApiError:
    error = errors.ApiError(400, message, code="protocol_error")
    error.ws_close_code = close_code
    return error


def _close_code(error: errors.ApiError) -> int:
    if getattr(error, "ws_close_code", None):
        return error.ws_close_code
    if error.code in _RETRY_LATER:
        return 1013
    if error.code in _SERVER_FAILED:
        return 1011
    return 1008


def _close_reason(message: str) -> str:
    return message.encode()[:_MAX_CLOSE_REASON].decode(errors="ignore")


def _text_of(message: dict, max_bytes: int) -> str:
    """The text of one received frame; a binary frame, one over `max_bytes` (the
    body limit) or a disconnect raises."""
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    if message.get("text") is None:
        raise protocol_error(
            "binary frames are not part of this protocol: send JSON text messages",
            _UNSUPPORTED_DATA,
        )
    text = message["text"]
    if len(text) > max_bytes or len(text.encode()) > max_bytes:
        raise protocol_error(f"a message may have at most {max_bytes} bytes", _MESSAGE_TOO_BIG)
    return text


async def _send(ws: WebSocket, message: dict | bytes) -> None:
    """Send one frame; a socket the transport already closed (the client left, or
    broke the protocol) reads as the client leaving, not as a server fault."""
    try:
        if isinstance(message, bytes):
            await ws.send_bytes(message)
        else:
            await ws.send_json(message)
    except RuntimeError as exc:  # starlette/uvicorn: send after the close
        if "websocket" not in str(exc).lower():
            raise
        raise WebSocketDisconnect(1006) from None


class _Session:
    def __init__(self, ws: WebSocket, runtime, request_id: str):
        self.ws = ws
        self.runtime = runtime
        self.request_id = request_id
        self.state: dict = {}  # as an HTTP request's: its error is counted once
        self.caller = ANONYMOUS
        self.session_key: str | None = None  # set while this session counts against its key's cap
        self.config: SessionConfig | None = None
        self.utterances: asyncio.Queue = asyncio.Queue()
        self.chars = 0
        self.count = 0
        # Idle accounting: when either side last did something, and how many
        # flushed utterances are still being spoken (the client waits on us then).
        self.active_at = time.monotonic()
        self.speaking = 0

    async def send_error(self, error: errors.ApiError) -> None:
        self.count_error(error.code)
        message = {"type": "error", "code": error.code, "message": error.message}
        if error.retry_after_s is not None:
            message["retry_after_s"] = error.retry_after_s
        try:
            await self.ws.send_json(message)
            await self.ws.close(_close_code(error), reason=_close_reason(error.message))
        except Exception:  # the client may be gone already
            pass

    def count_error(self, code: str) -> None:
        record_error(self.state, self.runtime.metrics, code)

    def count_request(self, status: int) -> None:
        self.runtime.metrics.requests.labels(route=ROUTE, code=str(status)).inc()

    def _authenticate(self) -> str:
        ws, keys = self.ws, self.runtime.api_keys
        header = ws.headers.get("authorization")

        def check() -> str:
            if header or keys.disabled:
                return keys.authenticate(header)
            return keys.authenticate_key(ws.query_params.get("api_key", ""))

        return authenticate(keys, self.runtime.auth_failures, client_address(ws.scope), check)

    def _claim_session(self) -> None:
        runtime = self.runtime
        # Without keys everyone is anonymous: cap per client address instead.
        key = (
            self.caller
            if self.caller != ANONYMOUS
            else f"{ANONYMOUS}@{client_address(self.ws.scope)}"
        )
        if not runtime.ws_sessions.acquire(key):
            limit = runtime.settings.ws_max_sessions_per_key
            raise errors.ApiError(
                429,
                f"this API key already has {limit} open sessions; close one first",
                code="too_many_sessions",
                type="rate_limit_error",
                retry_after_s=1.0,
            )
        self.session_key = key

    def release(self) -> None:
        if self.session_key is not None:
            self.runtime.ws_sessions.release(self.session_key)
            self.session_key = None

    async def open(self) -> None:
        """Authenticate, admit, read the config, say ready; raise ApiError to refuse."""
        ws, runtime = self.ws, self.runtime
        self.caller = self._authenticate()
        self._claim_session()
        wait_s = runtime.limiter.take(self.caller)
        if wait_s > 0:
            raise errors.rate_limited(wait_s)
        try:
            raw = _text_of(
                await asyncio.wait_for(ws.receive(), runtime.settings.ws_config_timeout_s),
                runtime.settings.max_body_bytes,
            )
        except TimeoutError:
            raise errors.ApiError(
                400, "no session.config message in time", code="protocol_error"
            ) from None
        try:
            self.config = SessionConfig.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])[:64] or "message"
            raise errors.invalid_request(
                f"session.config: {where}: {first['msg']}", param=where
            ) from None
        if self.config.model is not None and self.config.model not in runtime.served_models:
            raise errors.ApiError(
                404, f"model {_short(self.config.model)} is not served here", code="model_not_found"
            )
        if runtime.drain.draining:
            raise errors.unavailable(
                "this server is shutting down; retry on another", code="draining"
            )
        # Validate voice and sampling once, before any text arrives.
        self._build_request(text="", voice=await self._voice())
        await _send(
            ws,
            {
                "type": "session.ready",
                "request_id": self.request_id,
                "sample_rate": runtime.engine.info.sample_rate,
                "audio_format": "pcm_s16le",
            },
        )
        self.active_at = time.monotonic()

    async def _voice(self) -> SpeakingVoice:
        """The session's voice, looked up again for each utterance: a stored voice
        erased meanwhile is not spoken any more."""
        return await self.runtime.synthesizer.speaking_voice(self.config.voice, self.caller)

    def _build_request(self, text, voice: SpeakingVoice):
        c = self.config
        return self.runtime.synthesizer.build_request(
            text=text,
            voice=voice,
            instructions=c.instructions,
            language=c.language,
            sampling=c.sampling_overrides(),
            request_id=f"{self.request_id}.{self.count}",
            sample_format="s16",  # the session's audio is pcm_s16le
            timestamps=c.timestamps,
        )

    async def _next_message(self, current) -> dict | None:
        """The next client message; None when the open utterance's text stalled.

        Raises idle_timeout once the session has waited on its client (nothing
        being spoken) for the idle timeout.
        """
        settings = self.runtime.settings
        while True:
            now = time.monotonic()
            if current is not None:
                timeout = self.active_at + settings.ws_text_stall_s - now
            elif self.speaking:
                timeout = (
                    settings.ws_idle_timeout_s
                )  # look again later (an utterance may wait in the queue)
            else:
                timeout = self.active_at + settings.ws_idle_timeout_s - now
            try:
                return await asyncio.wait_for(self.ws.receive(), max(0.0, timeout))
            except TimeoutError:
                if current is not None:
                    return None
                if self.speaking or time.monotonic() < self.active_at + settings.ws_idle_timeout_s:
                    continue  # audio is still going out (or just did): the client is not idle
                raise errors.ApiError(
                    408,
                    f"no message for {settings.ws_idle_timeout_s:g} s and nothing left to say; closing",
                    code="idle_timeout",
                ) from None

    def _flush(self, current: asyncio.Queue) -> None:
        current.put_nowait(None)
        self.speaking += 1

    async def read(self) -> None:
        """Client messages -> per-utterance text queues, until `end`."""
        current: asyncio.Queue | None = None
        max_chars = self.runtime.settings.max_input_chars
        while True:
            message = await self._next_message(current)
            if message is None:  # the open utterance got no text for a while: say what it has
                self._flush(current)
                current = None
                continue
            text = _text_of(message, self.runtime.settings.max_body_bytes)
            self.active_at = time.monotonic()
            try:
                event = json.loads(text)
                kind = event["type"]
            except (ValueError, KeyError, TypeError, IndexError, RecursionError):
                raise protocol_error("each message must be a JSON object with a 'type'") from None
            if kind == "text.delta":
                text = event.get("text")
                if not isinstance(text, str):
                    raise protocol_error("text.delta needs a string 'text'")
                try:
                    utf8_text(text)
                except ValueError as exc:
                    raise errors.invalid_request(f"text.delta: {exc}", param="text") from None
                self.chars += len(text)
                if self.chars > max_chars:
                    raise errors.invalid_request(
                        f"more than {max_chars} characters of text in one session", param="text"
                    )
                if current is None:
                    current = asyncio.Queue()
                    await self.utterances.put(current)
                current.put_nowait(text)
            elif kind in ("flush", "end"):
                if current is not None:
                    self._flush(current)
                    current = None
                if kind == "end":
                    await self.utterances.put(None)
                    return
            else:
                raise protocol_error(f"unknown message type {_short(kind)}")

    async def speak(self) -> None:
        """Utterances in order -> engine -> audio frames to the client."""
        while (texts := await self.utterances.get()) is not None:
            # Opening the session paid for its first utterance.
            wait_s = self.runtime.limiter.take(self.caller) if self.count > 0 else 0.0
            if wait_s > 0:
                raise errors.rate_limited(wait_s)

            async def deltas(texts=texts):
                while (text := await texts.get()) is not None:
                    yield text

            submitted = time.monotonic()
            request = self._build_request(deltas(), await self._voice())
            utterance = self.runtime.synthesizer.submit(request, submitted)
            completed = False
            try:
                index = 0
                async for chunk in utterance.chunks():
                    if chunk.words:
                        await _send(
                            self.ws,
                            {
                                "type": "alignment",
                                "utterance": self.count,
                                **captions.alignment(chunk.words),
                                "words": captions.word_times(chunk.words),
                            },
                        )
                    await _send(
                        self.ws,
                        {
                            "type": "audio",
                            "utterance": self.count,
                            "index": index,
                            "samples": len(chunk.pcm),
                            "t_ms": round((time.monotonic() - submitted) * 1000, 1),
                        },
                    )
                    await _send(self.ws, chunk.s16le())
                    self.active_at = time.monotonic()
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
                failure = generation_failure(exc)
                if failure.status >= 500:
                    log.error(
                        "generation failed",
                        exc_info=exc,
                        extra={"request_id": self.request_id, "type": error_type(exc)},
                    )
                raise failure from None
            finally:
                utterance.finish(completed=completed)
            self.count_request(200)
            await _send(
                self.ws,
                {
                    "type": "utterance.done",
                    "utterance": self.count,
                    "audio_seconds": round(utterance.audio_s, 3),
                    "ttfa_ms": None
                    if utterance.ttfa_s is None
                    else round(utterance.ttfa_s * 1000, 1),
                    "total_ms": round((time.monotonic() - submitted) * 1000, 1),
                    "finish_reason": utterance.finish_reason,
                },
            )
            self.count += 1
            self.speaking -= 1
            self.active_at = time.monotonic()


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
        await _send(ws, {"type": "session.done", "utterances": session.count})
        await ws.close(1000)
    except WebSocketDisconnect:
        if sending_timed_out(ws.scope):
            session.count_error("send_timeout")
            session.count_request(408)
            log.warning(
                "the websocket client took no audio for the send timeout; connection dropped",
                extra={
                    "request_id": session.request_id,
                    "send_timeout_s": runtime.settings.send_timeout_s,
                },
            )
        else:
            session.count_error("client_disconnect")
            session.count_request(499)
            log.info("websocket client left", extra={"request_id": session.request_id})
    except errors.ApiError as error:
        session.count_request(error.status)
        await session.send_error(error)
    except Exception as exc:
        log.error(
            "websocket session failed", exc_info=exc, extra={"request_id": session.request_id}
        )
        session.count_request(500)
        await session.send_error(errors.internal())
    finally:
        session.release()
        for task in tasks:
            if not task.done():
                task.cancel()
                try:
                    await task
                except BaseException:
                    pass
