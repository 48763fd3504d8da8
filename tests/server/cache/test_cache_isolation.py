"""Tenants never read each other's cached audio, and erasing a voice erases its cached
audio at every level."""

from __future__ import annotations

import httpx
import pytest

from support.live_server import API_KEY, OTHER_KEY, LiveServer, auth
from support.polling import wait_for
from support.response_cache import settle, speak
from support.voice_uploads import recording, upload
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.response_cache import redis_level


def test_another_tenant_asking_the_same_gets_its_own_entry(cache_server, redis_server):
    mine = speak(cache_server, API_KEY, seed=9)
    settle(cache_server)
    theirs = speak(cache_server, OTHER_KEY, seed=9)
    settle(cache_server)
    mine_again = speak(cache_server, API_KEY, seed=9)
    assert (mine.cache, theirs.cache) == ("miss", "miss")
    assert mine_again.cache.startswith("hit-")
    assert len(redis_server.client().keys(redis_level.PREFIX + "*")) == 2


@pytest.fixture
def base_cache_server(tiny_base, cache_settings, redis_server, tmp_path):
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    redis_server.client().flushdb()
    engine = TTSEngine.from_pretrained(
        str(tiny_base), device="cpu", max_batch=2, max_queue=4, dtype="float32", cuda_graphs=False
    )
    settings = cache_settings(
        voices_dir=tmp_path / "voices",
        max_body_bytes=16 * 1024,
        max_voice_upload_bytes=400 * 1024,
    )
    with LiveServer(engine, settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live


def test_deleting_a_voice_erases_its_cached_audio_everywhere(
    base_cache_server, redis_server, s3_server
):
    server = base_cache_server
    uploaded = upload(server.base_url, recording(), API_KEY)
    assert uploaded.status_code == 201, uploaded.text
    voice_id = uploaded.json()["id"]
    made = speak(server, voice=voice_id, seed=4)
    settle(server)
    cache = server.runtime.response_cache
    redis = redis_server.client()
    s3_prefix = cache.level("s3").voice_prefix(voice_id)

    def held() -> dict[str, int]:
        return {
            "memory": len(cache.memory),
            "redis": len(redis.smembers(redis_level.voice_set_key(voice_id)))
            + len(redis.keys(redis_level.PREFIX + "*")),
            "s3": sum(s3_prefix in str(p) for p in s3_server.object_paths()),
        }

    assert made.cache == "miss"
    assert held() == {"memory": 1, "redis": 2, "s3": 1}
    deleted = httpx.delete(f"{server.base_url}/v1/audio/voices/{voice_id}", headers=auth())
    assert deleted.status_code == 200, deleted.text
    wait_for(lambda: held() == {"memory": 0, "redis": 0, "s3": 0}, 30, 0.05, "erasure")
    gone = httpx.post(
        f"{server.base_url}/v1/audio/speech",
        json={"model": server.runtime.served_models[0], "input": "A sentence made once.",
              "voice": voice_id, "seed": 4, "response_format": "wav"},
        headers=auth(),
    )  # fmt: skip
    assert gone.status_code == 400
