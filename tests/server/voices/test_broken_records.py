"""What the voice store reads back is checked like what arrives at the API: one junk
record in Redis (a profile that is no profile, missing or mistyped fields, a key of
another type, an index member that is no voice id) is skipped, logged, counted and
erasable; its tenant goes on listing, uploading, speaking and erasing, and the
retention sweeper goes on for every tenant. Real redis-server, real HTTP."""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest

from support.live_server import API_KEY, LiveServer, auth, metric_value
from support.runtime import ttsfleet
from support.stand_in_engine import StandInEngine
from support.voice_uploads import DAY, recording, upload, uploaded_voice_ids
from support.voices import clone_settings, store_voice
from ttsfleet_runtime import metrics
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.voice_store_redis import (
    EXPIRY,
    OWNERS,
    RedisVoiceStore,
    owner_key,
    voice_key,
)

# One of each kind of junk the hostile sweep planted, by the reason it is skipped for.
JUNK_PROFILE = "voice_0000000000000001"  # not JSON
MISSING_FIELDS = "voice_0000000000000002"
STRING_EXPIRY = "voice_0000000000000003"
WRONG_TYPE = "voice_0000000000000004"  # a string key where a hash belongs
NOT_AN_ID = b"\xff\xfe not utf-8"  # an owner set member


def plant_junk(client, owner: str, like: dict) -> None:
    """Junk records of `owner`, indexed as the store indexes real ones."""
    string_expiry = {**like, "id": STRING_EXPIRY, "expires_at": "2099-01-01"}
    client.hset(voice_key(JUNK_PROFILE), mapping={"profile": b"\xff{junk", "prompt": b"p"})
    client.hset(voice_key(MISSING_FIELDS), "profile", json.dumps({"id": MISSING_FIELDS}))
    client.hset(voice_key(STRING_EXPIRY), "profile", json.dumps(string_expiry))
    client.set(voice_key(WRONG_TYPE), "a string")
    for voice_id in (JUNK_PROFILE, MISSING_FIELDS, STRING_EXPIRY, WRONG_TYPE):
        client.sadd(owner_key(owner), voice_id)
        client.hset(OWNERS, voice_id, owner)
    client.sadd(owner_key(owner), NOT_AN_ID)


def test_a_tenant_with_junk_records_lists_uploads_speaks_and_erases(redis_url, redis_server):
    settings = clone_settings(voice_store_url=redis_url)
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as server:
        good = upload(server.base_url, recording(), API_KEY)
        assert good.status_code == 201, good.text
        good_id = good.json()["id"]
        client = redis_server.client()
        owner = client.hget(OWNERS, good_id).decode()
        plant_junk(client, owner, json.loads(client.hget(voice_key(good_id), "profile")))

        assert uploaded_voice_ids(server.base_url, API_KEY) == [good_id]
        got = httpx.get(server.base_url + f"/v1/audio/voices/{good_id}", headers=auth(API_KEY))
        assert got.status_code == 200, got.text
        spoken = httpx.post(
            server.base_url + "/v1/audio/speech",
            json={
                "model": server.runtime.served_models[0],
                "input": "Hello",
                "voice": good_id,
                "response_format": "pcm",
                "stream_format": "file",
            },
            headers=auth(API_KEY),
            timeout=30,
        )
        assert spoken.status_code == 200, spoken.text
        another = upload(server.base_url, recording(), API_KEY)
        assert another.status_code == 201, another.text
        for junk in (JUNK_PROFILE, MISSING_FIELDS, STRING_EXPIRY, WRONG_TYPE):
            # Unreadable, so not there for reading...
            read = httpx.get(server.base_url + f"/v1/audio/voices/{junk}", headers=auth(API_KEY))
            assert read.status_code == 404, (junk, read.text)
            # ...but its owner (by the index) can erase it.
            erased = httpx.delete(
                server.base_url + f"/v1/audio/voices/{junk}", headers=auth(API_KEY)
            )
            assert erased.status_code == 200, (junk, erased.text)
            assert not client.exists(voice_key(junk)) and not client.hexists(OWNERS, junk)
        assert sorted(uploaded_voice_ids(server.base_url, API_KEY)) == sorted(
            [good_id, another.json()["id"]]
        )
        skipped = {
            reason: metric_value(server.base_url, metrics.VOICE_RECORDS_SKIPPED, {"reason": reason})
            for reason in ("profile", "wrong_type", "index")
        }
        assert all(count > 0 for count in skipped.values()), skipped
        faults = [
            metric_value(server.base_url, metrics.ERRORS, {"type": t})
            for t in metrics.SERVER_FAULT_ERRORS
        ]
        assert faults == [0.0] * len(faults)


def test_erasing_a_tenant_removes_its_junk_index_members(redis_url, redis_server):
    store = RedisVoiceStore.from_url(redis_url)
    voice = store_voice(store)
    client = redis_server.client()
    plant_junk(client, "tenant-a", voice.profile())
    erased = {e.voice_id for e in store.erase_owner("tenant-a")}
    assert erased == {voice.id, JUNK_PROFILE, MISSING_FIELDS, STRING_EXPIRY, WRONG_TYPE}
    assert client.smembers(owner_key("tenant-a")) == set()
    store.close()


def test_junk_in_the_expiry_index_does_not_stop_the_sweeper(redis_url, redis_server, clock):
    store = RedisVoiceStore.from_url(redis_url, retention_s=DAY, clock=clock)
    other_tenants = store_voice(store, owner="tenant-b")
    broken = store_voice(store)
    client = redis_server.client()
    client.hset(voice_key(broken.id), "profile", b"junk")  # expires, but its profile is gone
    client.zadd(EXPIRY, {NOT_AN_ID: 1.0})
    clock.advance(2 * DAY)
    assert sorted(e.voice_id for e in store.erase_expired()) == sorted(
        [other_tenants.id, broken.id]
    )
    assert client.zcard(EXPIRY) == 0 and client.hlen(OWNERS) == 0
    store.close()


def test_the_admin_erases_a_corrupt_record_by_id(redis_url, redis_server):
    store = RedisVoiceStore.from_url(redis_url)
    voice = store_voice(store)
    redis_server.client().hset(voice_key(voice.id), "profile", b'{"id": 1}')
    result = subprocess.run(
        ttsfleet("voices", "delete", "--id", voice.id),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TTSFLEET_VOICE_STORE_URL": redis_url},
    )
    assert result.returncode == 0, result.stderr
    assert f"erased voice {voice.id} (owner tenant-a)" in result.stdout
    assert "Traceback" not in result.stderr
    assert not redis_server.client().exists(voice_key(voice.id))
    store.close()


@pytest.mark.parametrize(
    "field, junk",
    [("prompt", b"not an npz"), ("consent", b"\xff not json")],
)
def test_a_part_that_does_not_load_is_a_404_not_a_500(redis_url, redis_server, field, junk):
    settings = clone_settings(voice_store_url=redis_url)
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as server:
        voice_id = upload(server.base_url, recording(), API_KEY).json()["id"]
        redis_server.client().hset(voice_key(voice_id), field, junk)
        if field == "prompt":
            response = httpx.post(
                server.base_url + "/v1/audio/speech",
                json={"model": server.runtime.served_models[0], "input": "Hi", "voice": voice_id},
                headers=auth(API_KEY),
                timeout=30,
            )
            assert response.status_code == 400 and response.json()["error"]["param"] == "voice"
        else:
            response = httpx.get(
                server.base_url + f"/v1/audio/voices/{voice_id}/export", headers=auth(API_KEY)
            )
            assert response.status_code == 404, response.text
        skipped = metric_value(server.base_url, metrics.VOICE_RECORDS_SKIPPED, {"reason": field})
        assert skipped == 1


def test_a_broken_record_is_counted_each_time_and_logged_once(redis_url, redis_server, caplog):
    import logging

    store = RedisVoiceStore.from_url(redis_url)
    voice = store_voice(store)
    plant_junk(redis_server.client(), "tenant-a", voice.profile())
    heard = []
    store.on_record_skipped(heard.append)
    caplog.set_level(logging.WARNING)
    assert store.list("tenant-a") == store.list("tenant-a") == [voice]
    # Three junk profiles, a key of another type, a member that is no id: each listing.
    assert sorted(heard) == sorted(["profile", "profile", "profile", "wrong_type", "index"] * 2)
    logged = [r for r in caplog.records if r.getMessage().startswith("skipped an unreadable")]
    assert len(logged) == 5
    store.close()
