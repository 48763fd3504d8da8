"""Voices: the model's built-in speakers and the caller's uploaded voices.

Uploading a voice needs the speaker's explicit consent (`consent=true` and the
statement the uploader makes), a transcript of the reference audio, and audio
that decodes, lasts between the configured bounds and is not silent. Each
refusal is a 400 naming the field and the reason; a body over the upload limit
is a 413. Callers see and delete only their own uploads.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, File, Form, Request, UploadFile

from . import errors
from .speech_routes import ERROR_RESPONSES
from .voice_store import decode_reference_audio

log = logging.getLogger(__name__)
router = APIRouter()


def _store(request: Request):
    store = request.app.state.runtime.voices
    if store is None:
        raise errors.ApiError(404, "voice uploads are not enabled on this server (no --voices-dir)", code="not_found")
    return store


def _caller(request: Request) -> str:
    return request.scope["state"].get("caller", "anonymous")


@router.get("/v1/audio/voices", responses=ERROR_RESPONSES, summary="Built-in speakers and your uploaded voices")
async def list_voices(request: Request) -> dict:
    runtime = request.app.state.runtime
    info = runtime.engine.info
    data = [
        {"id": speaker, "object": "voice", "name": speaker, "type": "builtin", "languages": list(info.languages)}
        for speaker in info.speakers
    ]
    if runtime.voices is not None:
        data += [voice.public() for voice in runtime.voices.list(_caller(request))]
    return {"object": "list", "data": data}


@router.post("/v1/audio/voices", status_code=201, responses=ERROR_RESPONSES, summary="Upload a voice (with consent)")
async def create_voice(
    request: Request,
    audio: UploadFile = File(description="Reference recording: WAV, FLAC, OGG or MP3"),
    transcript: str = Form(min_length=1, max_length=2000, description="What is said in the recording"),
    consent: bool = Form(description="true: the speaker consented to this voice being cloned"),
    consent_statement: str = Form(
        default="The speaker consented to the cloning of their voice.",
        min_length=1,
        max_length=2000,
        description="Who consented, to what, and when (kept with the voice)",
    ),
    name: str = Form(default="", max_length=100),
    language: str = Form(default="auto", min_length=1, max_length=32),
) -> dict:
    store = _store(request)
    settings = request.app.state.runtime.settings
    if not consent:
        raise errors.invalid_request("consent must be true: upload only voices whose speaker consented", param="consent")
    data = await audio.read()
    if len(data) > settings.max_voice_upload_bytes:
        raise errors.body_too_large(settings.max_voice_upload_bytes)
    # Decoding is CPU work: keep the event loop (and other streams) moving.
    pcm, rate = await asyncio.to_thread(
        decode_reference_audio, data, settings.min_voice_seconds, settings.max_voice_seconds
    )
    voice = await asyncio.to_thread(
        store.create,
        pcm=pcm,
        sample_rate=rate,
        name=name or (audio.filename or "voice"),
        transcript=transcript,
        language=language,
        owner=_caller(request),
        consent_statement=consent_statement,
    )
    log.info("voice stored", extra={"request_id": request.state.request_id, "voice_id": voice.id})
    return voice.public()


@router.delete("/v1/audio/voices/{voice_id}", responses=ERROR_RESPONSES, summary="Erase an uploaded voice")
async def delete_voice(voice_id: str, request: Request) -> dict:
    await asyncio.to_thread(_store(request).delete, voice_id, _caller(request))
    log.info("voice erased", extra={"request_id": request.state.request_id, "voice_id": voice_id})
    return {"id": voice_id, "object": "voice", "deleted": True}
