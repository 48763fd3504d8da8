"""Fixtures for the response cache tests: servers over the real tiny engine on CPU whose
cache has all three levels, over the session's real redis-server and S3 server (s3s-fs,
tests/server/conftest.py)."""

from __future__ import annotations

import uuid

import pytest

from support.live_server import API_KEY, OTHER_KEY, LiveServer
from support.response_cache import AUDIO_S, MEMORY_BYTES
from support.s3_server import ACCESS_KEY, BUCKET, SECRET_KEY
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


@pytest.fixture
def cache_settings(redis_server, s3_server):
    """`cache_settings(**fields)`: settings of a server with all three cache levels."""

    def make(**fields) -> ServerSettings:
        return ServerSettings(
            **{
                "max_audio_seconds": AUDIO_S,
                "response_cache_memory_bytes": MEMORY_BYTES,
                "response_cache_redis_url": redis_server.url,
                "response_cache_s3_endpoint": s3_server.endpoint,
                "response_cache_s3_bucket": BUCKET,
                "response_cache_s3_access_key": ACCESS_KEY,
                "response_cache_s3_secret_key": SECRET_KEY,
                # Each server its own prefix: no test reads another's entries.
                "response_cache_s3_prefix": f"cache-test-{uuid.uuid4().hex[:12]}",
                **fields,
            }
        )

    return make


@pytest.fixture
def cache_server(make_engine, cache_settings, redis_server):
    """A server over the tiny CustomVoice engine with all three levels, all empty."""
    redis_server.client().flushdb()
    with LiveServer(make_engine(), cache_settings(), ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live
