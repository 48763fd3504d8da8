"""A full voice store refuses an upload with 507 `insufficient_storage`, a sentence that
says so, and nothing half-written; it is counted as capacity, not as a server fault
(the canary reads those). A real tmpfs that fills up (ENOSPC), a real redis-server at
its maxmemory (OOM)."""

from __future__ import annotations

import httpx
import pytest

from support.live_server import API_KEY, LiveServer, auth, metric_value
from support.stand_in_engine import StandInEngine
from support.voice_uploads import recording, upload
from support.voices import clone_settings, store_voice, tmpfs
from ttsfleet_runtime import metrics
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.voice_store_redis import RedisVoiceStore


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs: a voice's profile fits, its reference audio does not."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    with tmpfs(mount, "size=64k,mode=0700"):
        yield mount


def test_a_full_voices_disk_refuses_the_upload_with_507_and_keeps_nothing(tiny_disk):
    voices = tiny_disk / "voices"
    settings = clone_settings(voices_dir=voices)
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as server:
        refused = upload(server.base_url, recording(seconds=2.0), API_KEY)
        assert refused.status_code == 507, refused.text
        error = refused.json()["error"]
        assert error["code"] == "insufficient_storage"
        assert error["message"].startswith("the voice store is full (no space left on its disk)")
        assert list(voices.iterdir()) == []  # no staging folder, no part of the voice
        counted = {
            t: metric_value(server.base_url, metrics.ERRORS, {"type": t})
            for t in ("insufficient_storage", *metrics.SERVER_FAULT_ERRORS)
        }
    assert counted == {
        "insufficient_storage": 1.0,
        "internal": 0.0,
        "cuda_oom": 0.0,
        "engine_error": 0.0,
    }


def test_redis_at_its_memory_limit_is_full_not_unreachable(redis_url, redis_server):
    client = redis_server.client()
    store = RedisVoiceStore.from_url(redis_url)
    kept = store_voice(store)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)  # every write that needs memory is refused
    try:
        with pytest.raises(errors.ApiError) as refused:
            store_voice(store)
        assert (refused.value.status, refused.value.code) == (507, "insufficient_storage")
        assert "Redis is at its memory limit" in refused.value.message
        assert store.list("tenant-a") == [kept]  # reads are still answered
    finally:
        client.config_set("maxmemory", 0)
        store.close()


def test_an_unhandled_error_is_answered_500_and_logged_once(tmp_path, caplog):
    """A voices directory that vanished under the server (a file in its place): no
    sentence fits that, so it is a 500, and one log line carries the traceback."""
    import logging
    import shutil

    voices = tmp_path / "voices"
    settings = clone_settings(voices_dir=voices)
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as server:
        shutil.rmtree(voices)
        voices.write_text("not a directory")
        caplog.set_level(logging.INFO)
        refused = httpx.get(server.base_url + "/v1/audio/voices", headers=auth(API_KEY))
        assert refused.status_code == 500
        assert refused.json()["error"]["code"] == "internal"
        assert "Traceback" not in refused.text
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert [r.getMessage() for r in tracebacks] == ["unhandled error"]
