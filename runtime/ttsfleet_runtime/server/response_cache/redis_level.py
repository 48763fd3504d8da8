"""The fleet's level: cached responses in Redis, each with a TTL.

`ttsfleet:response:<digest>` holds an entry (entry.py's stored form); a stored
voice's entries are also members of `ttsfleet:response-voice:<voice id>`, a set
that lives as long as its newest member, so erasing a voice is one SMEMBERS and
one DEL, never a SCAN. The Redis may be the voice store's own (its keys are under
`ttsfleet:voices:`): with `maxmemory-policy volatile-lru` Redis evicts cached
responses (they all have a TTL) before it would refuse a voice upload.
"""

from __future__ import annotations

import time

from .entry import CachedResponse
from .key import CacheKey

PREFIX = "ttsfleet:response:"
VOICE_PREFIX = "ttsfleet:response-voice:"


def entry_key(key: CacheKey) -> str:
    return PREFIX + key.digest


def voice_set_key(voice_id: str) -> str:
    return VOICE_PREFIX + voice_id


class RedisLevel:
    name = "redis"

    def __init__(self, url: str, ttl_s: float, timeout_s: float):
        import redis.asyncio

        self.ttl_s = ttl_s
        self.client = redis.asyncio.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    async def get(self, key: CacheKey) -> CachedResponse | None:
        data = await self.client.get(entry_key(key))
        if data is None:
            return None
        return CachedResponse.from_bytes(data, time.time(), self.ttl_s)

    async def put(self, key: CacheKey, entry: CachedResponse) -> None:
        ttl_ms = int(self.ttl_s * 1000)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.set(entry_key(key), entry.to_bytes(), px=ttl_ms)
            if key.voice_id is not None:
                pipe.sadd(voice_set_key(key.voice_id), key.digest)
                pipe.pexpire(voice_set_key(key.voice_id), ttl_ms)
            await pipe.execute()

    async def delete(self, key: CacheKey) -> None:
        await self.client.delete(entry_key(key))

    async def erase_voice(self, voice_id: str) -> int:
        members = await self.client.smembers(voice_set_key(voice_id))
        keys = [PREFIX + m.decode() for m in members]
        await self.client.delete(*keys, voice_set_key(voice_id))
        return len(keys)

    async def close(self) -> None:
        await self.client.aclose()
