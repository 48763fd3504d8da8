"""A voice store that freezes or goes away degrades the server cleanly: store calls
wait in bounded lanes of their own, so unrelated work (one-shot cloning) is served
while they hang; each call ends in a bounded 503 + Retry-After; and cached voices are
spoken at most --voice-cache-stale after the store was last reached. A real
redis-server, frozen with SIGSTOP or stopped."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal

import httpx
import numpy as np
import pytest

from support.live_server import API_KEY, LiveServer, auth, metric_value
from support.polling import wait_for
from support.redis_server import RedisServer
from support.stand_in_engine import StandInEngine
from support.voice_uploads import recording, upload
from support.voices import clone_settings, one_shot, speak
from ttsfleet_runtime import metrics
from ttsfleet_runtime.metrics import RuntimeMetrics
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.voice_library import VoiceLibrary
from ttsfleet_runtime.server.voice_store_redis import RedisVoiceStore


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test alone: freezing or stopping it touches no other test."""
    server = RedisServer(tmp_path)
    yield server
    with contextlib.suppress(ProcessLookupError):
        server.process.send_signal(signal.SIGCONT)
    if server.process.poll() is None:
        server.stop()


@contextlib.contextmanager
def frozen(redis: RedisServer):
    """Redis alive but answering nothing (a stalled node, a full network buffer)."""
    redis.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        redis.process.send_signal(signal.SIGCONT)


def unknown_ids(n: int) -> list[str]:
    return [f"voice_{i:016x}" for i in range(1, n + 1)]


def test_lookups_hanging_on_a_frozen_store_do_not_hold_up_one_shot_cloning(own_redis):
    # More hanging lookups than asyncio's default pool has threads on this machine.
    hanging = min(32, (os.cpu_count() or 1) + 4) + 2
    # A bound longer than the test: the lookups hang until Redis thaws, not until a timeout.
    settings = clone_settings(voice_store_url=own_redis.url, voice_store_timeout_s=60)
    engine = StandInEngine(variant="Base", frames=10)
    with (
        LiveServer(engine, settings, ApiKeys((API_KEY,))) as server,
        concurrent.futures.ThreadPoolExecutor(hanging) as clients,
    ):
        with frozen(own_redis):
            lookups = [clients.submit(speak, server, voice=v) for v in unknown_ids(hanging)]

            def all_waiting_on_the_store() -> bool:
                misses = metric_value(
                    server.base_url, metrics.VOICE_CACHE_LOOKUPS, {"result": "miss"}
                )
                return misses == hanging

            wait_for(all_waiting_on_the_store, 30, interval=0.05, what="lookups to reach the store")
            unrelated = speak(server, voice="ignored", voice_clone=one_shot())
            assert unrelated.status_code == 200, unrelated.text
            # Served while every lookup still hangs on the frozen store.
            assert not any(lookup.done() for lookup in lookups)
        answers = [lookup.result(timeout=60) for lookup in lookups]
    assert {a.status_code for a in answers} == {400}  # unknown voices, once Redis answered
    assert {a.json()["error"]["param"] for a in answers} == {"voice"}


def test_a_call_to_a_frozen_store_ends_in_a_bounded_503(own_redis):
    settings = clone_settings(voice_store_url=own_redis.url, voice_store_timeout_s=0.5)
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as server:
        with frozen(own_redis):
            listed = httpx.get(server.base_url + "/v1/audio/voices", headers=auth(API_KEY))
            spoken = speak(server, voice=unknown_ids(1)[0])
        for refused in (listed, spoken):
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"] == "1"
            error = refused.json()["error"]
            assert error["code"] == "voice_store_unavailable"
            assert error["message"] == "the voice store did not answer within 0.5 s; retry"


def test_cached_voices_are_spoken_at_most_stale_s_without_the_store(own_redis):
    now = [0.0]
    engine = StandInEngine(variant="Base")
    store = RedisVoiceStore.from_url(own_redis.url, timeout_s=1.0)
    lib = VoiceLibrary(
        store,
        engine,
        RuntimeMetrics(engine.stats, lambda: True),
        stale_s=30.0,
        monotonic=lambda: now[0],
    )

    def speak_cached(voice_id: str):
        return asyncio.run(lib.cloned_voice(voice_id, "tenant-a"))

    pcm = (0.3 * np.sin(np.arange(48_000) / 7)).astype(np.float32)
    voice = asyncio.run(
        lib.add(
            pcm,
            name="n",
            transcript="Hi.",
            language="auto",
            owner="tenant-a",
            consent_statement="y",
        )
    )
    cloned = speak_cached(voice.id)
    lib.reconcile()  # the store reached at t=0
    own_redis.stop()
    with pytest.raises(errors.ApiError):
        lib.reconcile()  # the store gone: nothing confirms the cache any more

    now[0] = 30.0  # within the bound the pod still speaks the voice it has...
    assert speak_cached(voice.id) is cloned
    now[0] = 31.0  # ...past it, the store decides, and it cannot be reached
    with pytest.raises(errors.ApiError) as refused:
        speak_cached(voice.id)
    assert (refused.value.status, refused.value.code) == (503, "voice_store_unavailable")
    lib.close()


def test_a_pod_stops_speaking_cached_voices_when_the_store_stays_away(own_redis):
    settings = clone_settings(
        voice_store_url=own_redis.url, voice_cache_stale_s=1, voice_store_timeout_s=0.5
    )
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as server:
        voice_id = upload(server.base_url, recording(), API_KEY).json()["id"]
        assert speak(server, voice=voice_id).status_code == 200  # and now cached
        own_redis.stop()  # an erasure through another pod could no longer be heard

        def refused() -> bool:
            response = speak(server, voice=voice_id)
            assert response.status_code in (200, 503), response.text
            return response.status_code == 503

        wait_for(refused, 20, interval=0.1, what="the cached voice to be refused")
        error = speak(server, voice=voice_id).json()["error"]
        assert error["code"] == "voice_store_unavailable"
