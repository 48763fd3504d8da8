"""The body of `POST /v1/audio/speech`: OpenAI's fields plus the model's knobs.

Ranges live in the schema so clients (and schemathesis) see them; a value out
of range is refused with 400 naming the field. Unknown fields are refused too:
a misspelt knob silently ignored would be worse than an error. Types are
strict: `"1"` or `true` is not a number, `1.0` is not an integer (an integer
is still a number); a client's type bug is reported, not guessed at. Text
must be encodable as UTF-8: JSON's `"\\ud800"` decodes to a lone surrogate that
would otherwise reach the tokenizer and fail there as a server fault.

One-shot cloning rides in the JSON body (`voice_clone`, the recording as
base64) because that is what OpenAI's SDKs can add to a speech request
(`extra_body`); they cannot send multipart to this endpoint.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..engine.api import SAMPLING_BOUNDS

ResponseFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]
StreamFormat = Literal["audio", "sse", "file"]


def utf8_text(value: str) -> str:
    """Refuse a string with a lone surrogate (JSON allows `\\ud800`; UTF-8 does not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"text is not valid Unicode: a lone surrogate at character {exc.start}"
        ) from None
    return value


Text = Annotated[str, AfterValidator(utf8_text)]


def _bounded(param: str):
    """An optional sampling field with the engine's range for `param`."""
    bound = SAMPLING_BOUNDS[param]
    low = {"gt" if bound.low_open else "ge": bound.low}
    return Field(default=None, le=bound.high, **low)


class SamplingFields(BaseModel):
    """The model's sampling knobs, shared by the HTTP body and the WebSocket config."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # The ranges are the engine's (engine/api.py's SAMPLING_BOUNDS, their one home).
    temperature: float | None = _bounded("temperature")
    top_k: int | None = _bounded("top_k")
    top_p: float | None = _bounded("top_p")
    repetition_penalty: float | None = _bounded("repetition_penalty")
    subtalker_temperature: float | None = _bounded("subtalker_temperature")
    subtalker_top_k: int | None = _bounded("subtalker_top_k")
    subtalker_top_p: float | None = _bounded("subtalker_top_p")
    seed: int | None = _bounded("seed")

    def sampling_overrides(self) -> dict:
        """The sampling fields the client set (the engine's defaults fill the rest)."""
        return {
            name: value
            for name in SamplingFields.model_fields
            if (value := getattr(self, name)) is not None
        }


class VoiceClone(BaseModel):
    """A reference recording in the speech request itself: cloned for this request
    only and never stored (one-shot cloning, Base models)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    audio: str = Field(
        min_length=1,
        description="The reference recording, base64: WAV, FLAC, OGG or MP3, within the "
        "server's upload limits (bytes, 1-30 s).",
    )
    transcript: Text = Field(
        min_length=1, max_length=2000, description="What is said in the recording."
    )
    consent: bool = Field(
        description="true: the speaker consented to this voice being cloned (required)."
    )


class SpeechRequest(SamplingFields):
    model: Text = Field(
        min_length=1, max_length=256, description="The served model id (see GET /v1/models)."
    )
    input: Text = Field(
        min_length=1, description="Text to speak (at most the server's max input characters)."
    )
    voice: Text | None = Field(
        default=None,
        max_length=256,
        description="A built-in speaker (CustomVoice models) or an uploaded voice id (Base "
        "models); ignored when `voice_clone` is given.",
    )
    voice_clone: VoiceClone | None = Field(
        default=None,
        description="Base models: clone the voice of this reference for this request only "
        "(nothing is stored).",
    )
    response_format: ResponseFormat = Field(
        default="mp3", description="Audio container; pcm is raw s16le mono."
    )
    instructions: Text | None = Field(
        default=None,
        max_length=4096,
        description="Voice description (VoiceDesign) or style instruction.",
    )
    speed: float = Field(
        default=1.0,
        ge=0.25,
        le=4.0,
        description="Only 1.0 is supported: the model has no honest speed control.",
    )
    stream_format: StreamFormat | None = Field(
        default=None,
        description="'audio' (the default, as OpenAI's): the file's bytes as they are generated. "
        "'sse': server-sent events speech.audio.delta (base64) and speech.audio.done. "
        "'file': one whole file with exact sizes (the default for flac, which cannot be streamed).",
    )
    language: Text = Field(default="auto", min_length=1, max_length=32)
    cache: bool | None = Field(
        default=None,
        description="The response cache (where the server has one): unset caches requests "
        "with a `seed` (reproducible audio); true also caches one without a seed (its first "
        "audio is served again); false never caches. The X-TTSFleet-Cache header says what "
        "happened: miss, hit-memory, hit-redis, hit-s3 or bypass.",
    )
