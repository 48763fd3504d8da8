"""Per-key token buckets: a burst passes, then 429 with Retry-After, per key."""

from __future__ import annotations

import httpx
import pytest

from support.live_server import API_KEY, OTHER_KEY, SHORT_AUDIO_S, auth
from support.live_server import LiveServer
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.rate_limit import TokenBucketLimiter
from ttsfleet_runtime.server.settings import ServerSettings


@pytest.fixture(scope="module")
def limited_server(make_engine):
    settings = ServerSettings(rate_limit_per_s=0.5, rate_limit_burst=2, max_audio_seconds=SHORT_AUDIO_S)
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY, OTHER_KEY))) as live:
        yield live


def test_burst_passes_then_429_with_retry_after(limited_server):
    url = limited_server.base_url + "/v1/models"
    assert [httpx.get(url, headers=auth()).status_code for _ in range(2)] == [200, 200]
    refused = httpx.get(url, headers=auth())
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    # One token takes 2 s at 0.5/s; a little has refilled since.
    assert refused.headers["retry-after"] == "2"
    # Another key has its own bucket.
    assert httpx.get(url, headers=auth(OTHER_KEY)).status_code == 200


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_bucket_refills_at_its_rate():
    clock = FakeClock()
    limiter = TokenBucketLimiter(rate_per_s=2.0, burst=3, clock=clock)
    assert [limiter.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.take("a") == pytest.approx(0.5)
    clock.now += 0.5
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == pytest.approx(0.5)
    clock.now += 10  # idle: the bucket is full again, never more than the burst
    assert [limiter.take("a") for _ in range(4)][-1] == pytest.approx(0.5)


def test_rate_zero_means_no_limit():
    limiter = TokenBucketLimiter(rate_per_s=0, burst=1)
    assert all(limiter.take("a") == 0.0 for _ in range(100))
