"""Stored bytes are trusted no more than a request, and a cache level that is down costs
a miss, never a failed request; memory stays within its bound."""

from __future__ import annotations

from support.live_server import API_KEY, LiveServer, metric_value
from support.ports import free_port
from support.response_cache import MEMORY_BYTES, clear_memory, frames_generated, settle, speak
from ttsfleet_runtime import metrics
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.response_cache import redis_level


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def test_a_corrupted_entry_is_a_counted_miss_never_served(cache_server, redis_server, s3_server):
    ask = dict(fmt="pcm", seed=11, stream_format="file")
    made = speak(cache_server, **ask)
    settle(cache_server)
    redis = redis_server.client()
    (name,) = redis.keys(redis_level.PREFIX + "*")
    redis.set(name, flip_last_byte(redis.get(name)), keepttl=True)
    clear_memory(cache_server)

    past_redis = speak(cache_server, **ask)
    assert past_redis.cache == "hit-s3"
    assert past_redis.body == made.body
    url = cache_server.base_url
    assert metric_value(url, metrics.RESPONSE_CACHE_CORRUPT, {"level": "redis"}) == 1

    settle(cache_server)
    prefix = cache_server.runtime.response_cache.level("s3").prefix
    (stored,) = [p for p in s3_server.object_paths() if prefix in str(p)]
    stored.write_bytes(flip_last_byte(stored.read_bytes()))
    clear_memory(cache_server)
    redis.flushdb()
    generated = frames_generated(cache_server)

    made_again = speak(cache_server, **ask)
    assert made_again.cache == "miss"
    assert frames_generated(cache_server) > generated
    assert made_again.body == made.body
    assert metric_value(url, metrics.RESPONSE_CACHE_CORRUPT, {"level": "s3"}) == 1


def test_redis_and_s3_down_cost_a_miss_not_the_request(make_engine, cache_settings):
    closed = f"127.0.0.1:{free_port()}"
    settings = cache_settings(
        response_cache_memory_bytes=0,
        response_cache_redis_url=f"redis://{closed}/0",
        response_cache_s3_endpoint=f"http://{closed}",
    )
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY,))) as server:
        first = speak(server, seed=5)
        settle(server)
        second = speak(server, seed=5)
        url = server.base_url
        assert (first.cache, second.cache) == ("miss", "miss")
        assert len(first.body) > 44 and second.body == first.body
        for level in ("redis", "s3"):
            # The first read failed and was counted; later calls pass the level over.
            assert metric_value(url, metrics.RESPONSE_CACHE_ERRORS, {"level": level}) == 1
            assert (
                metric_value(
                    url, metrics.RESPONSE_CACHE_LOOKUPS, {"level": level, "result": "miss"}
                )
                == 2
            )
        assert metric_value(url, metrics.ERRORS, {"type": "internal"}) == 0


def test_memory_evicts_the_least_recently_used_to_stay_within_its_bound(cache_server):
    first = speak(cache_server, seed=21)
    settle(cache_server)
    second = speak(cache_server, seed=22)
    settle(cache_server)
    memory = cache_server.runtime.response_cache.memory
    url = cache_server.base_url
    assert len(first.body) + len(second.body) > MEMORY_BYTES
    assert len(memory) == 1 and memory.bytes == len(second.body)
    assert metric_value(url, metrics.RESPONSE_CACHE_EVICTIONS, {"level": "memory"}) == 1
    assert metric_value(url, metrics.RESPONSE_CACHE_MEMORY_BYTES) == len(second.body)
    # The evicted one is still in the shared levels.
    assert speak(cache_server, seed=21).cache == "hit-redis"
