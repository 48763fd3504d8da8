"""The speech route's side of the response cache: look up, answer a hit, fill on a miss.

A hit is answered here without the engine: no batch slot, no admission queue, no
drain hold. It has the headers a miss has (content type, X-Audio-Sample-Rate,
Server-Timing, and X-Audio-Duration for a whole file) and the same shape: a whole
file, the encoded stream's bytes, or SSE deltas then `speech.audio.done` with the
usage the miss reported; the stored bytes are sent as fast as the connection takes
them. `X-TTSFleet-Cache` says which: miss, hit-<level>, or bypass (not meant to be
reproducible, or the server keeps no cache for this request).
"""

from __future__ import annotations

import base64
import dataclasses
import time

from fastapi.responses import Response, StreamingResponse

from ..engine import api
from .response_cache import CachedResponse, CacheKey, ResponseCache, cache_key, wants_cache
from .speech_request import SpeechRequest

CACHE_HEADER = "X-TTSFleet-Cache"
# Stored bytes go out in pieces of this size: one write per piece, no pacing.
SEND_PIECE_BYTES = 64 * 1024


def model_identity(settings, info: api.ModelInfo, version: str) -> dict:
    """What names the audio a server makes, beside the request (key.py says why each)."""
    return {
        "checkpoint": settings.model,
        "revision": settings.model_revision,
        "name": info.name,
        "size": info.size,
        "variant": info.variant,
        "tokenizer_rate_hz": info.tokenizer_rate_hz,
        "sample_rate": info.sample_rate,
        "dtype": settings.dtype,
        "weights": settings.weights,  # fp8 weights make other samples than bf16
        "device": settings.device,
        "runtime_version": version,
    }


@dataclasses.dataclass
class CacheFill:
    """A miss's response as it is sent; stored only once it has all been sent."""

    cache: ResponseCache
    key: CacheKey
    content_type: str
    sample_rate: int
    parts: list[bytes] = dataclasses.field(default_factory=list)
    size: int = 0
    frames: int = 0

    def add(self, data: bytes, frames: int) -> None:
        self.frames += frames
        self.size += len(data)
        if self.size <= self.cache.max_object_bytes:
            self.parts.append(data)
        else:  # too large to keep: hold nothing more of it
            self.parts = []

    def complete(self, audio_s: float) -> None:
        if self.size > self.cache.max_object_bytes:
            return
        entry = CachedResponse(
            body=b"".join(self.parts),
            content_type=self.content_type,
            sample_rate=self.sample_rate,
            audio_s=audio_s,
            frames=self.frames,
            made_at=time.time(),
        )
        self.parts = []
        self.cache.store(self.key, entry)


@dataclasses.dataclass
class CacheLookup:
    key: CacheKey
    hit: CachedResponse | None
    level: str | None


async def look_up(
    runtime, body: SpeechRequest, request: api.SynthesisRequest, voice_id: str | None, tenant: str
) -> CacheLookup | None:
    """The cache's answer for a request, or None when the request is not cached."""
    cache: ResponseCache | None = runtime.response_cache
    if cache is None:
        return None
    if not wants_cache(body.seed, body.cache):
        runtime.metrics.response_cache_requests.labels(result="bypass").inc()
        return None
    key = cache_key(
        tenant=tenant,
        model=runtime.model_identity,
        voice_id=voice_id,
        request=request,
        body=body,
    )
    found = await cache.get(key)
    if found is None:
        runtime.metrics.response_cache_requests.labels(result="miss").inc()
        return CacheLookup(key, None, None)
    entry, level = found
    runtime.metrics.response_cache_requests.labels(result=f"hit-{level}").inc()
    return CacheLookup(key, entry, level)


def cache_header(runtime, lookup: CacheLookup | None) -> dict[str, str]:
    if runtime.response_cache is None:
        return {}
    if lookup is None:
        return {CACHE_HEADER: "bypass"}
    return {CACHE_HEADER: "miss" if lookup.hit is None else f"hit-{lookup.level}"}


def answer_hit(runtime, lookup: CacheLookup, shape: str, received_at: float) -> Response:
    """A hit in the shape the request asked for (see the module docstring)."""
    entry = lookup.hit
    assert entry is not None
    runtime.metrics.audio_seconds.inc(entry.audio_s)
    served_in_ms = (time.monotonic() - received_at) * 1000
    headers = {
        "X-Audio-Sample-Rate": str(entry.sample_rate),
        "Server-Timing": f"cache;desc={lookup.level}, ttfa;dur={served_in_ms:.1f}",
        **cache_header(runtime, lookup),
    }
    if shape == "file":
        headers["X-Audio-Duration"] = f"{entry.audio_s:.3f}"
        return Response(entry.body, media_type=entry.content_type, headers=headers)
    if shape == "audio":
        return StreamingResponse(
            _pieces(entry.body), media_type=entry.content_type, headers=headers
        )
    headers["Cache-Control"] = "no-cache"
    return StreamingResponse(_sse_events(entry), media_type="text/event-stream", headers=headers)


async def _pieces(body: bytes):
    for start in range(0, len(body), SEND_PIECE_BYTES):
        yield body[start : start + SEND_PIECE_BYTES]


async def _sse_events(entry: CachedResponse):
    from .speech_routes import sse_event as _sse  # (speech_routes imports this module)

    async for piece in _pieces(entry.body):
        yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(piece).decode()})
    usage = {"input_tokens": 0, "output_tokens": entry.frames, "total_tokens": entry.frames}
    yield _sse(
        {"type": "speech.audio.done", "usage": usage, "audio_seconds": round(entry.audio_s, 3)}
    )
