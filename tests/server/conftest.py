"""Fixtures for the server tests: real uvicorn servers on loopback over the
real engine on CPU, over the tiny random checkpoint of tests/conftest.py.

Random weights never say EOS, so every utterance runs to the server's
`max_audio_seconds`: that is how tests choose short or long generations.
The response cache and batch jobs share one real redis-server and one real S3 server
(s3s-fs) for the session.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.live_server import API_KEY, OTHER_KEY, SHORT_AUDIO_S, LiveServer
from support.redis_server import RedisServer
from support.s3_server import ACCESS_KEY, BUCKET, SECRET_KEY, S3Server
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.response_cache.s3_client import S3Client
from ttsfleet_runtime.settings import ServerSettings


@pytest.fixture(scope="session")
def make_engine(tiny_custom_voice):
    """A fresh real engine on CPU over the tiny checkpoint."""
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    def make(max_batch: int = 4, max_queue: int = 8):
        return TTSEngine.from_pretrained(
            str(tiny_custom_voice),
            device="cpu",
            max_batch=max_batch,
            max_queue=max_queue,
            dtype="float32",
            cuda_graphs=False,
        )

    return make


@pytest.fixture(scope="session")
def voices_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def server(voices_root, make_engine):
    """The default server: two keys, voice uploads on, no rate limit."""
    settings = ServerSettings(
        voices_dir=voices_root,
        max_body_bytes=16 * 1024,
        max_input_chars=500,
        max_voice_upload_bytes=400 * 1024,
        max_audio_seconds=SHORT_AUDIO_S,
    )
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live


@pytest.fixture
def model_id(server) -> str:
    return server.runtime.served_models[0]


@pytest.fixture
def openai_client(server):
    import openai

    return openai.OpenAI(
        base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=60
    )


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3"))

    async def create_bucket():
        client = S3Client(server.endpoint, BUCKET, ACCESS_KEY, SECRET_KEY)
        await client.create_bucket()
        await client.close()

    asyncio.run(create_bucket())
    yield server
    server.stop()
