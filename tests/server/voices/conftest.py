"""Fixtures for the voice tests: a real redis-server, both voice stores over a clock the
test moves, and servers over the stand-in engine's Base variant (it clones without the
real encoders; support/stand_in_engine.py)."""

from __future__ import annotations

import pytest

from support.live_server import API_KEY, OTHER_KEY, LiveServer
from support.redis_server import RedisServer
from support.stand_in_engine import StandInEngine
from support.voice_uploads import DAY
from support.voices import Clock, clone_settings
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.voice_store import VoiceQuota
from ttsfleet_runtime.server.voice_store_local import LocalVoiceStore
from ttsfleet_runtime.server.voice_store_redis import RedisVoiceStore


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    """The URL of an empty Redis database."""
    redis_server.client().flushdb()
    return redis_server.url


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["local", "redis"])
def make_store(request, tmp_path, clock):
    """`make_store(quota=None, retention_days=30)`: a store of the parametrised kind;
    stores made by one test share their voices (one directory, one Redis database)."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    made = []

    def make(quota: VoiceQuota | None = None, retention_days: float = 30.0):
        retention_s = retention_days * DAY
        if url is None:
            store = LocalVoiceStore(tmp_path / "voices", quota, retention_s, clock)
        else:
            store = RedisVoiceStore.from_url(url, quota, retention_s, clock)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def clone_server(tmp_path):
    """A server over the stand-in Base engine, voices in a directory, two keys."""
    settings = clone_settings(voices_dir=tmp_path / "voices")
    engine = StandInEngine(variant="Base", frames=10)
    with LiveServer(engine, settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live


@pytest.fixture(scope="module", params=[12, 25], ids=["12hz", "25hz"])
def base_server(request, tmp_path_factory):
    """A server over the real tiny Base engine of that tokenizer rate, voices in a folder."""
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    checkpoint = request.getfixturevalue("tiny_base" if request.param == 12 else "tiny_25hz_base")
    engine = TTSEngine.from_pretrained(
        str(checkpoint), device="cpu", max_batch=2, max_queue=4, dtype="float32", cuda_graphs=False
    )
    settings = clone_settings(voices_dir=tmp_path_factory.mktemp("voices"))
    with LiveServer(engine, settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live
