"""Both voice stores pass the same suite (the directory and a real redis-server):
atomic writes of all four parts, owners and quotas, export, erasure that other
stores hear of, and retention on a clock the test moves."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import soundfile

from support.polling import wait_for
from support.voice_uploads import DAY
from support.voices import PCM, PROMPT, store_voice
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.voice_store import VoiceQuota
from ttsfleet_runtime.server.voice_store_redis import RedisVoiceStore


def test_a_voice_is_stored_whole_and_read_back_by_its_owner_only(make_store):
    store = make_store()
    voice = store_voice(store)
    assert store.get(voice.id, "tenant-a") == voice
    assert store.prompt(voice.id, "tenant-a") == (voice, PROMPT)
    assert [v.id for v in store.list("tenant-a")] == [voice.id]
    assert store.list("tenant-b") == []
    for call in (store.get, store.prompt, store.export, store.delete):
        with pytest.raises(errors.ApiError) as refused:
            call(voice.id, "tenant-b")
        assert refused.value.status == 404


def test_export_returns_the_audio_transcript_and_consent_record(make_store):
    store = make_store()
    voice = store_voice(store)
    exported = store.export(voice.id, "tenant-a")
    audio, rate = soundfile.read(io.BytesIO(exported.audio_wav), dtype="float32")
    assert rate == 24_000 and np.allclose(audio, PCM, atol=1e-4)
    assert exported.voice.transcript == "Hello there."
    assert exported.consent["statement"] == "Alice agreed on 2026-11-01."
    assert exported.consent["given_by"] == "tenant-a" and exported.consent["consent"] is True


def test_erasure_removes_every_part_and_is_heard_where_the_store_is_shared(make_store):
    """Both stores announce their own erasures; Redis also those made through others
    (a directory belongs to one process: its server finds others' by reconciling)."""
    first, second = make_store(), make_store()  # two pods over one store
    heard_first, heard_second = [], []
    first.on_erased(heard_first.append)
    second.on_erased(heard_second.append)
    second.watch()
    voice = store_voice(first)
    erased = first.delete(voice.id, "tenant-a")
    assert (erased.voice_id, erased.owner) == (voice.id, "tenant-a")
    for store in (first, second):
        with pytest.raises(errors.ApiError):
            store.get(voice.id, None)
        assert store.existing([voice.id]) == set()
        assert store._read(voice.id, "audio") is None and store._read(voice.id, "prompt") is None
    assert heard_first == [voice.id]
    if isinstance(second, RedisVoiceStore):
        wait_for(lambda: voice.id in heard_second, 5, interval=0.05, what="the erasure heard")


def test_erasing_a_tenant_leaves_other_tenants_alone(make_store):
    store = make_store()
    a_voices = {store_voice(store).id, store_voice(store).id}
    b_voice = store_voice(store, owner="tenant-b")
    assert {e.voice_id for e in store.erase_owner("tenant-a")} == a_voices
    assert store.list("tenant-a") == [] and store.list("tenant-b") == [b_voice]
    assert store.erase_owner("tenant-a") == []


def test_quota_counts_voices_and_bytes_per_tenant(make_store):
    one = store_voice(make_store())
    store = make_store(quota=VoiceQuota(max_voices=3, max_bytes=3 * one.stored_bytes - 1))
    store_voice(store)  # with `one`, two of tenant-a's voices
    with pytest.raises(errors.ApiError) as refused:
        store_voice(store)
    assert refused.value.code == "voice_quota_exceeded" and "storage quota" in str(refused.value)
    store_voice(store, owner="tenant-b")
    store.delete(one.id, "tenant-a")
    store_voice(store)
    small = make_store(quota=VoiceQuota(max_voices=2, max_bytes=10**9))
    with pytest.raises(errors.ApiError) as refused:
        small.check_quota("tenant-a")
    assert "2 of 2 voices" in str(refused.value)


def test_parallel_uploads_through_two_stores_cannot_overshoot_the_quota(make_store):
    import concurrent.futures

    quota = VoiceQuota(max_voices=3, max_bytes=10**9)
    stores = [make_store(quota=quota), make_store(quota=quota)]

    def upload(i: int) -> str:
        try:
            store_voice(stores[i % 2])
            return "stored"
        except errors.ApiError as exc:
            return exc.code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = sorted(pool.map(upload, range(8)))
    assert outcomes == ["stored"] * 3 + ["voice_quota_exceeded"] * 5
    assert len(stores[0].list("tenant-a")) == 3


def test_an_expired_voice_is_gone_at_once_and_erased_by_the_sweeper(make_store, clock):
    store = make_store(retention_days=30)
    old = store_voice(store)
    assert old.expires_at == old.created_at + 30 * DAY
    assert old.public()["expires_at"].startswith("2027-")  # 30 days after the clock's start
    clock.advance(10 * DAY)
    young = store_voice(store)
    assert store.erase_expired() == []

    clock.advance(20 * DAY)
    # Past its expiry the voice is neither listed, nor spoken, nor exported...
    assert store.list("tenant-a") == [young]
    for call in (store.get, store.prompt, store.export):
        with pytest.raises(errors.ApiError):
            call(old.id, "tenant-a")
    # ...and the sweeper erases every part of it.
    heard = []
    store.on_erased(heard.append)
    assert [e.voice_id for e in store.erase_expired()] == [old.id]
    assert heard == [old.id] and store.existing([old.id, young.id]) == {young.id}
    assert store._read(old.id, "audio") is None
    assert store.erase_expired() == []


def test_retention_zero_keeps_voices(make_store, clock):
    store = make_store(retention_days=0)
    voice = store_voice(store)
    assert voice.expires_at is None and voice.public()["expires_at"] is None
    clock.advance(10_000 * DAY)
    assert store.erase_expired() == [] and store.list("tenant-a") == [voice]


def test_redis_itself_erases_an_expired_voice_and_the_sweeper_its_index_entries(
    redis_url, redis_server
):
    """The key TTL works on real time: a voice kept 1 s is gone from Redis after it."""
    import time

    from ttsfleet_runtime.server.voice_store_redis import OWNERS, RedisVoiceStore, voice_key

    store = RedisVoiceStore.from_url(redis_url, retention_s=1.0)
    voice = store_voice(store)
    client = redis_server.client()
    assert client.exists(voice_key(voice.id))
    time.sleep(1.3)
    assert not client.exists(voice_key(voice.id))
    assert client.hexists(OWNERS, voice.id)  # the index outlives the key...
    assert [e.voice_id for e in store.erase_expired()] == [voice.id]
    assert not client.hexists(OWNERS, voice.id)  # ...until the sweeper's pass
    assert client.smembers(f"ttsfleet:voices:owner:{voice.owner}") == set()
    store.close()


def test_the_local_store_reads_voices_stored_before_retention(tmp_path, clock):
    """Profiles with an ISO `created_at` and no prompt: listed, expiring, erasable."""
    from ttsfleet_runtime.server.voice_store_local import LocalVoiceStore

    folder = tmp_path / "voices" / "voice_00000000000000aa"
    folder.mkdir(parents=True)
    profile = {
        "id": folder.name,
        "name": "old",
        "transcript": "t",
        "language": "auto",
        "owner": "tenant-a",
        "created_at": "2027-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "sample_rate": 24000,
    }
    (folder / "profile.json").write_text(json.dumps(profile))
    (folder / "reference.wav").write_bytes(b"RIFF")
    store = LocalVoiceStore(tmp_path / "voices", retention_s=30 * DAY, clock=clock)
    clock.now = 1_798_761_600.0 + 29 * DAY  # 2027-01-30
    assert [v.id for v in store.list("tenant-a")] == [folder.name]
    clock.advance(DAY)
    assert [e.voice_id for e in store.erase_expired()] == [folder.name]
    assert not folder.exists()
