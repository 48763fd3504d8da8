"""A reproducible request is made once, then served from each level in turn, byte for
byte, with the miss's headers and without the engine; what is not meant to be
reproducible is never cached."""

from __future__ import annotations

import base64
import json

import openai
import pytest

from support.live_server import metric_value
from support.response_cache import clear_memory, frames_generated, settle, speak
from ttsfleet_runtime import metrics


def audio_of(spoken, stream_format: str) -> bytes:
    """The audio bytes of a response (SSE: its deltas, decoded and joined)."""
    if stream_format != "sse":
        return spoken.body
    events = [
        json.loads(line[len(b"data: ") :])
        for line in spoken.body.split(b"\n\n")
        if line.startswith(b"data: ")
    ]
    assert events[-1]["type"] == "speech.audio.done"
    return b"".join(base64.b64decode(e["audio"]) for e in events[:-1])


@pytest.mark.parametrize(
    ("fmt", "stream_format"), [("wav", "audio"), ("flac", "file"), ("pcm", "sse")]
)
def test_a_seeded_request_is_served_from_memory_then_redis_then_s3(
    cache_server, redis_server, fmt, stream_format
):
    ask = dict(fmt=fmt, seed=7, stream_format=stream_format)
    miss = speak(cache_server, **ask)
    assert miss.cache == "miss"
    settle(cache_server)
    generated = frames_generated(cache_server)

    from_memory = speak(cache_server, **ask)
    clear_memory(cache_server)
    from_redis = speak(cache_server, **ask)
    settle(cache_server)  # Redis' hit filled memory back
    from_memory_again = speak(cache_server, **ask)
    clear_memory(cache_server)
    redis_server.client().flushdb()
    from_s3 = speak(cache_server, **ask)

    hits = [from_memory, from_redis, from_memory_again, from_s3]
    assert [h.cache for h in hits] == ["hit-memory", "hit-redis", "hit-memory", "hit-s3"]
    for hit in hits:
        assert hit.body == miss.body or audio_of(hit, stream_format) == audio_of(
            miss, stream_format
        )
        assert hit.same_headers() == miss.same_headers()
    assert frames_generated(cache_server) == generated, "a hit ran the engine"
    url = cache_server.base_url
    assert metric_value(url, metrics.RESPONSE_CACHE_LOOKUPS, {"level": "s3", "result": "hit"}) == 1
    assert metric_value(url, metrics.RESPONSE_CACHE_REQUESTS, {"result": "hit-memory"}) == 2
    assert metric_value(url, metrics.RESPONSE_CACHE_STORED_BYTES, {"level": "s3"}) > 0


def test_a_request_without_a_seed_is_never_cached(cache_server):
    first = speak(cache_server)
    second = speak(cache_server)
    settle(cache_server)
    assert (first.cache, second.cache) == ("bypass", "bypass")
    assert len(cache_server.runtime.response_cache.memory) == 0
    url = cache_server.base_url
    assert metric_value(url, metrics.RESPONSE_CACHE_REQUESTS, {"result": "bypass"}) == 2
    assert metric_value(url, metrics.RESPONSE_CACHE_STORED_BYTES, {"level": "redis"}) == 0


def test_a_seeded_request_may_opt_out_and_an_unseeded_one_opt_in(cache_server):
    assert speak(cache_server, seed=3, cache=False).cache == "bypass"
    made = speak(cache_server, cache=True)
    settle(cache_server)
    again = speak(cache_server, cache=True)
    assert (made.cache, again.cache) == ("miss", "hit-memory")
    assert again.body == made.body


def test_a_larger_response_than_the_bound_is_served_but_not_kept(make_engine, cache_settings):
    from support.live_server import API_KEY, LiveServer
    from ttsfleet_runtime.server.auth import ApiKeys

    settings = cache_settings(response_cache_max_object_bytes=1024)
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY,))) as server:
        first = speak(server, seed=1)
        settle(server)
        second = speak(server, seed=1)
    assert len(first.body) > 1024
    assert (first.cache, second.cache) == ("miss", "miss")


def test_a_hit_needs_no_engine_admission(cache_server):
    made = speak(cache_server, seed=13)
    settle(cache_server)
    # An engine that admits nothing more: a miss is refused, a hit is still answered.
    cache_server.call(cache_server.runtime.stop_engine, 1.0)
    hit = speak(cache_server, seed=13)
    assert (hit.cache, hit.body) == ("hit-memory", made.body)
    with pytest.raises(openai.APIStatusError) as refused:
        speak(cache_server, seed=14)
    assert refused.value.status_code == 503
