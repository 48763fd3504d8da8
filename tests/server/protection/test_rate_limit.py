"""Per-key token buckets: a burst passes, then 429 with Retry-After, per key;
WebSocket session setup spends tokens too; bad keys are limited per address."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from support.live_server import API_KEY, OTHER_KEY, SHORT_AUDIO_S, LiveServer, auth
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.rate_limit import TokenBucketLimiter
from ttsfleet_runtime.settings import ServerSettings


@pytest.fixture(scope="module")
def limited_server(make_engine):
    settings = ServerSettings(
        rate_limit_per_s=0.5, rate_limit_burst=2, max_audio_seconds=SHORT_AUDIO_S
    )
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


WS_KEY = "test-key-carol"


@pytest.fixture(scope="module")
def strict_server(make_engine):
    """0.5 sessions/s after a burst of 2 per key; 5 failed authentications per address."""
    settings = ServerSettings(
        rate_limit_per_s=0.5,
        rate_limit_burst=2,
        auth_failure_burst=5,
        auth_failure_rate_per_s=0.2,
        max_audio_seconds=SHORT_AUDIO_S,
    )
    with LiveServer(make_engine(), settings, ApiKeys((WS_KEY,))) as live:
        yield live


def session_setup(server, key: str) -> dict:
    """Open a WebSocket session; the server's first answer (ready or error)."""
    url = server.ws_url + "/v1/audio/speech/stream"
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=10) as ws:
        try:
            ws.send(json.dumps({"type": "session.config"}))
        except ConnectionClosed:
            pass  # refused before the config was read: the answer is waiting all the same
        return json.loads(ws.recv(timeout=10))


def test_websocket_session_setup_spends_the_keys_tokens(strict_server):
    answers = [session_setup(strict_server, WS_KEY) for _ in range(3)]
    assert [a["type"] for a in answers] == ["session.ready", "session.ready", "error"]
    assert answers[2]["code"] == "rate_limited" and answers[2]["retry_after_s"] > 0


def test_failed_authentication_is_limited_per_address(strict_server):
    """After a burst of bad keys the address's bad keys get 429 + Retry-After;
    a good key from the same address (a tenant behind the same proxy) still passes."""
    url = strict_server.base_url + "/v1/models"
    statuses = [httpx.get(url, headers=auth(f"guess-{i}")).status_code for i in range(8)]
    assert statuses == [401] * 5 + [429] * 3
    refused = httpx.get(url, headers=auth("guess-again"))
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "invalid API keys from this address" in refused.json()["error"]["message"]
    # A good key from that address is checked and passes (the earlier tests may
    # have spent its own rate-limit tokens: that 429 is the key's, not the address's).
    good = httpx.get(url, headers=auth(WS_KEY))
    assert good.status_code in (200, 429) and "invalid API keys" not in good.text
    # The WebSocket door is the same door.
    assert session_setup(strict_server, "guess-ws")["code"] == "rate_limited"
    # (The good key may meet its own session rate limit, never the address's.)
    assert "invalid API keys" not in session_setup(strict_server, WS_KEY).get("message", "")
    # Health and metrics need no key and stay open.
    assert httpx.get(strict_server.base_url + "/health/live").status_code == 200
