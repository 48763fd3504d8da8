"""Driving a server's response cache from a test: speak through the openai SDK, wait for
the background fills, empty one level, look at what a level holds."""

from __future__ import annotations

import dataclasses

import openai

from support.live_server import API_KEY

CACHE_HEADER = "X-TTSFleet-Cache"
# The cache servers speak 0.8 s (10 frames) a request: half the CPU of the server tests'
# usual 1.6 s. Their memory bound: one such response as 16-bit PCM or WAV is ~38 KB, so
# memory holds one entry and a second evicts it.
AUDIO_S = 0.8
MEMORY_BYTES = 50_000
# Headers a hit must answer with as the miss did (Server-Timing's values differ).
SAME_HEADERS = ("content-type", "x-audio-sample-rate", "x-audio-duration")


@dataclasses.dataclass
class Spoken:
    body: bytes
    headers: dict[str, str]

    @property
    def cache(self) -> str:
        return self.headers.get(CACHE_HEADER.lower(), "")

    def same_headers(self) -> dict[str, str | None]:
        return {name: self.headers.get(name) for name in SAME_HEADERS}


def speak(server, key: str = API_KEY, *, fmt: str = "wav", **extra) -> Spoken:
    """One speech request through the openai SDK's streaming response; `extra` goes in
    `extra_body` (seed, cache, stream_format)."""
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0, timeout=60)
    with client.audio.speech.with_streaming_response.create(
        model=server.runtime.served_models[0],
        voice=extra.pop("voice", "Vivian"),
        input=extra.pop("input", "A sentence made once."),
        response_format=fmt,
        extra_body=extra,
    ) as response:
        body = b"".join(response.iter_bytes())
        return Spoken(body, {k.lower(): v for k, v in response.headers.items()})


def settle(server) -> None:
    """Wait until the cache's background writes are done."""
    server.call(server.runtime.response_cache.settle)


def clear_memory(server) -> None:
    async def clear():
        server.runtime.response_cache.memory.clear()

    server.call(clear)


def frames_generated(server) -> int:
    return server.engine.stats().frames_total
