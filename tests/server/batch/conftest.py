"""Fixtures for the batch job tests: servers with the batch API over the real tiny engine
on CPU, the session's real redis-server and S3 server (tests/server/conftest.py)."""

from __future__ import annotations

import openai
import pytest

from support.batches import batch_settings
from support.live_server import API_KEY, OTHER_KEY, LiveServer
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


@pytest.fixture(scope="module")
def batch_server(make_engine, redis_server, s3_server):
    """A server with the batch API and a batch worker (two items at once), over an empty
    Redis: a worker takes any batch it finds there."""
    redis_server.client().flushdb()
    settings = ServerSettings(**batch_settings(redis_server, s3_server))
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live


@pytest.fixture(scope="module")
def api_only_server(make_engine, redis_server, s3_server):
    """A server with the batch API and no worker: batches stay queued until told (no
    other module's worker runs meanwhile: each is torn down with its module)."""
    settings = ServerSettings(**batch_settings(redis_server, s3_server, batch_worker_concurrency=0))
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live


def sdk(server, key: str = API_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0, timeout=60)


@pytest.fixture
def client(batch_server) -> openai.OpenAI:
    return sdk(batch_server)


@pytest.fixture
def other_tenant(batch_server) -> openai.OpenAI:
    return sdk(batch_server, OTHER_KEY)


@pytest.fixture
def queued_client(api_only_server) -> openai.OpenAI:
    return sdk(api_only_server)
