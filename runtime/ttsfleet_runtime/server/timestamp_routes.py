"""`POST /v1/audio/speech/with-timestamps`: speech with word timestamps and captions.

The body is the speech endpoint's (OpenAI's fields) with two more:
- `stream_format`: "jsonl" (the default) streams JSON lines as the audio is made,
  ElevenLabs' `/stream/with-timestamps` shape: each line a chunk of the encoded audio
  as `audio_base64` plus the `alignment` of the words timed with it (ElevenLabs'
  `characters`, `character_start_times_seconds`, `character_end_times_seconds`) and
  the same words as Kokoro-FastAPI's `words` (`word`, `start_time`, `end_time`).
  The last line has `"done": true`, the audio's length and the captions. "json"
  answers one JSON object with the whole file, the whole alignment and the captions
  (ElevenLabs' `/with-timestamps`); flac only this way.
- `captions`: "srt" or "vtt" puts captions of the whole utterance in the last line
  (or the object). They ride in the same response because the audio of a request
  without a seed is drawn anew each time: captions from a second request would
  describe other audio.

Times are seconds from the start of the audio, from the engine's own text-to-frame
alignment (engine/word_timing.py has the rule, docs/timestamps.md its limits). A
word's alignment usually comes before the audio that speaks it: the model reads
the text faster than it speaks.
"""

from __future__ import annotations

import base64
import json
from typing import Literal

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from ..engine.api import TimedWord
from . import audio_encoding, captions
from .speech_request import SpeechRequest
from .speech_routes import (
    ERROR_RESPONSES,
    ClosingStreamingResponse,
    awaited,
    cancel_unfinished,
    check_request,
    encoded,
    submit_speech,
)

router = APIRouter()


class TimestampedSpeechRequest(SpeechRequest):
    stream_format: Literal["jsonl", "json"] = Field(
        default="jsonl",
        description="'jsonl': JSON lines, each an audio chunk (audio_base64) with the alignment "
        "of the words timed with it, as they are made. 'json': one JSON object once all "
        "audio is made.",
    )
    captions: Literal["srt", "vtt"] | None = Field(
        default=None,
        description="Captions of the whole utterance in this format, in the last line "
        "(or the object): cues of at most 2 lines of 42 characters and 7 seconds.",
    )


def _words_fields(words: list[TimedWord]) -> dict:
    return {"alignment": captions.alignment(words), "words": captions.word_times(words)}


@router.post(
    "/v1/audio/speech/with-timestamps",
    responses={
        200: {
            "content": {"application/x-ndjson": {}, "application/json": {}},
            "description": "Audio with word timestamps",
        },
        **ERROR_RESPONSES,
    },
    summary="Synthesise speech with word timestamps and captions",
)
async def create_speech_with_timestamps(body: TimestampedSpeechRequest, request: Request):
    streamed = body.stream_format == "jsonl"
    check_request(body, request.app.state.runtime, streamed=streamed)
    utterance = await submit_speech(body, request, timestamps=True)
    state = request.scope["state"]
    headers = {"X-Audio-Sample-Rate": str(utterance.sample_rate)}
    chunks = utterance.chunks()

    if not streamed:
        pcm, words = await awaited(request, utterance, _collect_with_words(chunks))
        utterance.finish(completed=True)
        data = audio_encoding.encode_file(pcm, utterance.sample_rate, body.response_format)
        headers["Server-Timing"] = utterance.server_timing()
        result = {
            "audio_base64": base64.b64encode(data).decode(),
            **_words_fields(words),
            "audio_seconds": round(utterance.audio_s, 3),
        }
        if body.captions:
            result["captions"] = captions.captions(words, body.captions)
        return JSONResponse(result, headers=headers)

    first = await awaited(request, utterance, anext(chunks, None))
    headers["Server-Timing"] = utterance.server_timing()
    encoder = audio_encoding.StreamEncoder(body.response_format, utterance.sample_rate)

    return ClosingStreamingResponse(
        _json_lines(
            encoded(first, chunks, encoder, utterance, request), utterance, body.captions, state
        ),
        media_type="application/x-ndjson",
        headers=headers,
        on_close=lambda: cancel_unfinished(request, utterance),
    )


async def _collect_with_words(chunks):
    parts, words = [], []
    async for chunk in chunks:
        parts.append(chunk.pcm)
        words.extend(chunk.words)
    pcm = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return pcm, words


async def _json_lines(encoded_chunks, utterance, caption_format: str | None, state: dict):
    words: list[TimedWord] = []
    try:
        async for data, chunk in encoded_chunks:
            audio = base64.b64encode(data).decode()
            if chunk is not None:
                words.extend(chunk.words)
                yield _line({"audio_base64": audio, **_words_fields(list(chunk.words))})
                continue
            last = {"audio_base64": audio, "alignment": None, "words": [], "done": True}
            last["audio_seconds"] = round(utterance.audio_s, 3)
            if caption_format:
                last["captions"] = captions.captions(words, caption_format)
            yield _line(last)
    except Exception:
        # Headers are sent (`encoded` counted the failure): say so in the stream.
        error = {"message": "generation failed", "code": state.get("error")}
        yield _line({"error": error, "done": True})
    finally:
        await encoded_chunks.aclose()


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()
