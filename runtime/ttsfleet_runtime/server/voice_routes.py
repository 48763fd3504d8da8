"""Voices: the model's built-in speakers and the caller's uploaded voices.

An upload is cloned once (voice_library.py) and stored with its audio and
consent record; a tenant can read one back (`GET .../{id}`), export everything
kept of it (`GET .../{id}/export`: audio as base64 WAV, transcript, consent
record, in one JSON document) and erase it (`DELETE`). Only a model that
clones (a Base model) takes uploads.

Uploading a voice needs the speaker's explicit consent (the field `consent` sent
once, exactly `true`, and the statement the uploader makes), a transcript of the
reference audio that fits its length, and audio that decodes, lasts between the
configured bounds, is neither silent nor far past full scale (checked from the
header first, then decoded in bounded blocks: reference_audio.py), and that the
engine can turn into a voice it will speak. Nothing that could never be spoken is
stored. Each refusal is a 400 naming the field and the reason, and stores and
counts nothing; a body over the upload limit is a 413; a tenant over its voice
quota gets a 409. Callers see and delete only their own tenant's uploads.

With auth disabled every caller is the same tenant, "anonymous", and could
list and erase everyone's voices: so uploads are off then unless the server
is started with `--anonymous-voices on`, which says so loudly in its log.
"""

from __future__ import annotations

import base64
import logging

from fastapi import APIRouter, File, Form, Request, UploadFile

from ..settings import ServerSettings
from . import errors
from .auth import ANONYMOUS, ApiKeys
from .reference_audio import ReferenceDecoder, ReferenceLimits
from .speech_routes import ERROR_RESPONSES
from .voice_library import VoiceLibrary
from .voice_store import SECONDS_PER_DAY, VoiceQuota, VoiceStore
from .voice_store_local import LocalVoiceStore
from .voice_store_redis import RedisVoiceStore

log = logging.getLogger(__name__)
router = APIRouter()
# The longest voice name, given or taken from the audio's file name.
MAX_NAME_CHARS = 100
# The form fields of an upload (`create_voice`'s), each to be sent at most once.
UPLOAD_FIELDS = ("audio", "transcript", "consent", "consent_statement", "name", "language")
VOICE_RESPONSES = {
    **ERROR_RESPONSES,
    404: {"description": "Unknown voice, or voice uploads are off on this server"},
    409: {"description": "The tenant's voice quota (count or bytes) is used up"},
}


def _open_voice_store(settings: ServerSettings) -> VoiceStore:
    """The store the settings name: Redis when `voice_store_url` is set, else the
    voices directory."""
    quota = VoiceQuota(settings.max_voices_per_tenant, settings.max_voice_bytes_per_tenant)
    retention_s = settings.voice_retention_days * SECONDS_PER_DAY
    if settings.voice_store_url:
        return RedisVoiceStore.from_url(
            settings.voice_store_url, quota, retention_s, timeout_s=settings.voice_store_timeout_s
        )
    return LocalVoiceStore(settings.voices_dir, quota, retention_s)


def open_store(settings: ServerSettings, api_keys: ApiKeys) -> VoiceStore | None:
    """The voice store this server serves, or None (uploads off; the log says why).

    A local directory's staging leftovers of uploads killed mid-way are erased:
    this process is the only writer of its voices directory."""
    if settings.voices_dir is None and not settings.voice_store_url:
        return None
    if api_keys.disabled and not settings.anonymous_voices:
        log.warning(
            "voice uploads are off: auth is disabled, so every caller would share (list, use and "
            "erase) every voice; give API keys, or --anonymous-voices on to accept that"
        )
        return None
    store = _open_voice_store(settings)
    if api_keys.disabled:
        log.warning(
            "auth is disabled and --anonymous-voices is on: EVERY caller can list, use and erase "
            "EVERY uploaded voice in %s",
            store.describe(),
        )
    if isinstance(store, LocalVoiceStore):
        for leftover in store.remove_staging_leftovers():
            log.warning("erased an interrupted voice upload", extra={"path": leftover.where})
    log.info(
        "voice store open",
        extra={"store": store.describe(), "retention_days": settings.voice_retention_days},
    )
    return store


def reference_decoder(settings: ServerSettings, sample_rate: int) -> ReferenceDecoder:
    """Decodes uploads into mono audio at the model's `sample_rate`."""
    limits = ReferenceLimits(settings.min_voice_seconds, settings.max_voice_seconds)
    return ReferenceDecoder(limits, sample_rate)


async def _check_fields_sent_once(request: Request) -> None:
    """400 naming an upload field sent more than once: a parser keeps one of them
    (which one is its choice), so a consent record must not depend on it. Other
    fields are ignored, as the route ignores them."""
    form = await request.form()  # parsed once already for the route's fields
    seen: set[str] = set()
    for field, _ in form.multi_items():
        if field not in UPLOAD_FIELDS:
            continue
        if field in seen:
            raise errors.invalid_request(
                f"the field `{field}` was sent more than once; send it once", param=field
            )
        seen.add(field)


def _library(request: Request) -> VoiceLibrary:
    runtime = request.app.state.runtime
    if runtime.voices is None:
        stored = runtime.settings.voices_dir is not None or runtime.settings.voice_store_url
        why = "auth is disabled" if stored else "no --voices-dir or voice store"
        raise errors.not_found(f"voice uploads are not enabled on this server ({why})")
    return runtime.voices


def _caller(request: Request) -> str:
    return request.scope["state"].get("caller", ANONYMOUS)


@router.get(
    "/v1/audio/voices",
    responses=VOICE_RESPONSES,
    summary="Built-in speakers and your uploaded voices",
)
async def list_voices(request: Request) -> dict:
    runtime = request.app.state.runtime
    info = runtime.engine.info
    data = [
        {
            "id": speaker,
            "object": "voice",
            "name": speaker,
            "type": "builtin",
            "languages": list(info.languages),
        }
        for speaker in info.speakers
    ]
    if runtime.voices is not None:
        stored = await runtime.voices.list(_caller(request))
        data += [voice.public() for voice in stored]
    return {"object": "list", "data": data}


@router.post(
    "/v1/audio/voices",
    status_code=201,
    responses=VOICE_RESPONSES,
    summary="Upload a voice (with consent)",
)
async def create_voice(
    request: Request,
    audio: UploadFile = File(description="Reference recording: WAV, FLAC, OGG or MP3"),
    transcript: str = Form(
        min_length=1, max_length=2000, description="What is said in the recording"
    ),
    consent: str = Form(
        description="exactly `true`: the speaker consented to this voice being cloned"
    ),
    consent_statement: str = Form(
        default="The speaker consented to the cloning of their voice.",
        min_length=1,
        max_length=2000,
        description="Who consented, to what, and when (kept with the voice)",
    ),
    name: str = Form(
        default="",
        max_length=MAX_NAME_CHARS,
        description="The voice's name; default: the audio's file name",
    ),
    language: str = Form(default="auto", min_length=1, max_length=32),
) -> dict:
    library = _library(request)
    runtime = request.app.state.runtime
    settings = runtime.settings
    await _check_fields_sent_once(request)
    # The consent record says `true`: only the word itself, not what a form parser
    # would also read as true (1, yes, on), is the speaker's recorded consent.
    if consent != "true":
        raise errors.invalid_request(
            "consent must be true (the word `true`, sent once): upload only voices whose "
            "speaker consented",
            param="consent",
        )
    name = name or (audio.filename or "voice")
    if len(name) > MAX_NAME_CHARS:
        raise errors.invalid_request(
            f"the file name, which names the voice when no `name` is sent, is {len(name)} "
            f"characters; a voice name has at most {MAX_NAME_CHARS}: send a `name` or a "
            "shorter file name",
            param="name",
        )
    if not runtime.engine.info.supports_voice_clone:
        raise errors.invalid_request(
            f"model {runtime.engine.info.name} cannot clone voices; upload to a Base model",
            param="audio",
        )
    await library.check_quota(_caller(request))
    data = await audio.read()
    if len(data) > settings.max_voice_upload_bytes:
        raise errors.body_too_large(settings.max_voice_upload_bytes)
    decoder: ReferenceDecoder = request.app.state.reference_decoder
    pcm = await decoder.decode(data)
    voice = await library.add(
        pcm,
        name=name,
        transcript=transcript,
        language=language,
        owner=_caller(request),
        consent_statement=consent_statement,
    )
    log.info("voice stored", extra={"request_id": request.state.request_id, "voice_id": voice.id})
    return voice.public()


@router.delete(
    "/v1/audio/voices/{voice_id}", responses=VOICE_RESPONSES, summary="Erase an uploaded voice"
)
async def delete_voice(voice_id: str, request: Request) -> dict:
    await _library(request).delete(voice_id, _caller(request))
    log.info("voice erased", extra={"request_id": request.state.request_id, "voice_id": voice_id})
    return {"id": voice_id, "object": "voice", "deleted": True}


@router.get(
    "/v1/audio/voices/{voice_id}", responses=VOICE_RESPONSES, summary="One of your uploaded voices"
)
async def get_voice(voice_id: str, request: Request) -> dict:
    voice = await _library(request).get(voice_id, _caller(request))
    return voice.public()


@router.get(
    "/v1/audio/voices/{voice_id}/export",
    responses=VOICE_RESPONSES,
    summary="Everything kept of your voice: audio, transcript, consent record",
)
async def export_voice(voice_id: str, request: Request) -> dict:
    """One JSON document (the audio as base64 WAV): what a data-access request gets."""
    exported = await _library(request).export(voice_id, _caller(request))
    voice = exported.voice
    log.info("voice exported", extra={"request_id": request.state.request_id, "voice_id": voice_id})
    return {
        "object": "voice.export",
        "voice": voice.public(),
        "transcript": voice.transcript,
        "consent": exported.consent,
        "audio": {
            "format": "wav",
            "sample_rate": voice.sample_rate,
            "data": base64.b64encode(exported.audio_wav).decode(),
        },
    }
