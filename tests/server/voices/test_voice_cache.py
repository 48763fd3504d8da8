"""The prompt cache of a pod: bounded, forgets erased voices at once (or at the next
reconciliation when the announcement was missed), never serves a voice past its
expiry, and the sweeper erases expired voices everywhere. Both stores, a moved clock."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from support.stand_in_engine import StandInEngine
from support.voice_uploads import DAY
from ttsfleet_runtime.metrics import RuntimeMetrics
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.voice_library import VoiceLibrary

PCM = (0.3 * np.sin(np.arange(48_000) / 7)).astype(np.float32)


def library(store, cache_size=256) -> VoiceLibrary:
    engine = StandInEngine(variant="Base")
    return VoiceLibrary(
        store, engine, RuntimeMetrics(engine.stats, lambda: True), cache_size=cache_size
    )


def add(lib: VoiceLibrary, owner="tenant-a"):
    return asyncio.run(
        lib.add(
            PCM,
            name="n",
            transcript="Hello.",
            language="auto",
            owner=owner,
            consent_statement="yes",
        )
    )


def speak(lib: VoiceLibrary, voice_id: str, owner="tenant-a"):
    return asyncio.run(lib.cloned_voice(voice_id, owner))


def test_an_upload_is_cloned_once_and_served_from_the_cache(make_store):
    lib = library(make_store())
    voice = add(lib)
    cloned = speak(lib, voice.id)
    assert cloned.model == "stand-in-tiny-Base" and cloned.ref_text == "Hello."
    assert speak(lib, voice.id) is cloned and lib.engine.clones == 1
    with pytest.raises(errors.ApiError):
        speak(lib, voice.id, owner="tenant-b")


def test_the_cache_is_bounded(make_store):
    lib = library(make_store(), cache_size=2)
    voices = [add(lib) for _ in range(3)]
    for voice in voices:
        speak(lib, voice.id)
    assert lib.cache.ids() == [voices[1].id, voices[2].id]


def test_a_voice_erased_through_another_pod_is_forgotten(make_store):
    here, there = library(make_store()), library(make_store())
    here.store.watch()
    voice = add(here)
    speak(here, voice.id)
    there.store.delete(voice.id, "tenant-a")
    # Redis: the announcement arrives by itself; a directory: the reconciliation finds it.
    here.reconcile()
    from support.polling import wait_for

    wait_for(lambda: voice.id not in here.cache.ids(), 5, interval=0.05, what="forgotten")
    with pytest.raises(errors.ApiError):
        speak(here, voice.id)


def test_a_cached_voice_is_not_served_past_its_expiry_and_the_sweep_erases_it(make_store, clock):
    lib = library(make_store(retention_days=30))
    voice = add(lib)
    speak(lib, voice.id)
    clock.advance(30 * DAY)
    with pytest.raises(errors.ApiError) as refused:
        speak(lib, voice.id)
    assert refused.value.status == 404
    lib.sweep()
    assert lib.store.existing([voice.id]) == set() and lib.cache.ids() == []


def test_the_store_url_password_is_in_no_error(redis_server):
    from ttsfleet_runtime.server.voice_store_redis import RedisVoiceStore, StoreUrlError

    for url in ("http://:hunter2-secret@host:1/0", "redis://:hunter2-secret@host:notaport/0"):
        with pytest.raises(StoreUrlError) as refused:
            RedisVoiceStore.from_url(url)
        assert "hunter2" not in str(refused.value)
    wrong = RedisVoiceStore.from_url(f"redis://:hunter2-secret@127.0.0.1:{redis_server.port}/0")
    assert "hunter2" not in wrong.describe()
    with pytest.raises(errors.ApiError) as refused:
        wrong.list("tenant-a")
    assert refused.value.code == "voice_store_unavailable" and "hunter2" not in str(refused.value)
