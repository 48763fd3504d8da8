"""Every level is bounded in time: Redis entries carry their TTL, and an S3 entry older
than its TTL is a miss (and deleted) even where no lifecycle rule has removed it yet."""

from __future__ import annotations

import asyncio
import time

from support.s3_server import ACCESS_KEY, BUCKET, SECRET_KEY
from ttsfleet_runtime.metrics import RuntimeMetrics
from ttsfleet_runtime.server.response_cache import CachedResponse, CacheKey, ResponseCache
from ttsfleet_runtime.server.response_cache.redis_level import RedisLevel, entry_key
from ttsfleet_runtime.server.response_cache.s3_client import S3Client
from ttsfleet_runtime.server.response_cache.s3_level import S3Level

DAY = 86_400.0


def entry(made_at: float) -> CachedResponse:
    return CachedResponse(b"RIFF-audio", "audio/wav", 24_000, 0.5, 6, made_at)


def metrics() -> RuntimeMetrics:
    return RuntimeMetrics(lambda: None, lambda: True)


def test_an_s3_entry_past_its_ttl_is_a_miss_and_is_deleted(s3_server):
    key = CacheKey("ab" * 32, "tenant-a", None)

    async def run():
        client = S3Client(s3_server.endpoint, BUCKET, ACCESS_KEY, SECRET_KEY)
        level = S3Level(client, "expiry-test", ttl_s=DAY)
        cache = ResponseCache([level], metrics(), max_object_bytes=1 << 20, timeout_s=5)
        await level.put(key, entry(made_at=time.time() - DAY - 60))
        stale = await cache.get(key)
        left = await client.list_keys("expiry-test/")
        await level.put(key, entry(made_at=time.time() - DAY + 60))
        fresh = await cache.get(key)
        await cache.close()
        return stale, left, fresh

    stale, left, fresh = asyncio.run(run())
    assert stale is None and left == []
    assert fresh is not None and fresh[1] == "s3"


def test_a_redis_entry_and_its_voice_set_carry_the_ttl(redis_server):
    redis_server.client().flushdb()
    key = CacheKey("cd" * 32, "tenant-a", "voice_abc")

    async def run():
        level = RedisLevel(redis_server.url, ttl_s=3600, timeout_s=5)
        await level.put(key, entry(made_at=time.time()))
        await level.close()

    asyncio.run(run())
    client = redis_server.client()
    assert 3590_000 < client.pttl(entry_key(key)) <= 3600_000
    assert 3590_000 < client.pttl("ttsfleet:response-voice:voice_abc") <= 3600_000
