"""What a cache key is made of: everything that changes the audio, and who asked.

The key is derived from the request's own fields, not from a hand-kept list of the
ones that matter: every field of the engine's `SynthesisRequest` (its sampling
parameters included) and of the HTTP body is keyed, except those named in
`NOT_AUDIO_RELEVANT` with the reason they cannot change a byte of the response. A
field added later is therefore keyed until someone argues it out of the key
(tests/server/cache/test_cache_key.py pins both lists). Beside the request:
the model's identity (checkpoint path or hub id and revision, variant, size,
tokenizer rate, sample rate, dtype and device, and the runtime's version, since a
new engine may compute other samples), the voice (a stored voice by its id: ids
are never reused, so a re-uploaded voice is a new key; a one-shot clone by the
digest of its prompt) and the tenant, so no tenant can ever read another's entry.

Only requests meant to be reproducible are cached (`wants_cache`): those with a
seed, or with `cache: true`; `cache: false` opts a seeded request out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from ...engine import api

# Field -> why it cannot change the response's bytes.
NOT_AUDIO_RELEVANT: dict[str, dict[str, str]] = {
    "SynthesisRequest": {
        "request_id": "names the request in logs only",
        "buffer_s": "paces generation for a slow client; the samples are the same",
        "timestamps": "records which frame read which text token; the samples are the same "
        "(and /with-timestamps, its only asker, is not cached)",
        "priority": "decides when a request gets a batch slot, not what it computes there",
    },
    "SpeechRequest": {
        "cache": "the opt-in itself: a request with and without it makes the same audio",
    },
}


@dataclasses.dataclass(frozen=True)
class CacheKey:
    digest: str  # sha256 hex of the key material
    tenant: str
    voice_id: str | None  # a stored voice: its entries are erased with it

    def __str__(self) -> str:
        return self.digest


def wants_cache(seed: int | None, cache: bool | None) -> bool:
    """Whether a request's audio is meant to be reproducible (see the module docstring)."""
    if cache is not None:
        return cache
    return seed is not None


def _plain(value: Any) -> Any:
    """A JSON-able form of a field's value (pydantic models and dataclasses as dicts)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def cache_key(
    *,
    tenant: str,
    model: dict[str, Any],
    voice_id: str | None,
    request: api.SynthesisRequest,
    body: Any,
) -> CacheKey:
    """The key of a response: `model` is the server's model identity (`model_identity`),
    `voice_id` the stored voice spoken (None: a built-in speaker, the model's own
    choice, or a one-shot clone, keyed by its prompt's digest), `body` the HTTP body."""
    if not isinstance(request.text, str):
        raise TypeError("only a whole text can be cached, not a stream of text")
    skip = NOT_AUDIO_RELEVANT["SynthesisRequest"]
    synthesis = {}
    for field in dataclasses.fields(request):
        if field.name in skip:
            continue
        value = getattr(request, field.name)
        if field.name == "cloned_voice" and value is not None:
            value = voice_id or hashlib.sha256(value.to_bytes()).hexdigest()
        synthesis[field.name] = _plain(value)
    skip_body = NOT_AUDIO_RELEVANT["SpeechRequest"]
    body_fields = {
        name: _plain(getattr(body, name))
        for name in type(body).model_fields
        if name not in skip_body
    }
    material = {
        "tenant": tenant,
        "model": model,
        "voice_id": voice_id,
        "synthesis": synthesis,
        "body": body_fields,
    }
    encoded = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return CacheKey(hashlib.sha256(encoded.encode()).hexdigest(), tenant, voice_id)
