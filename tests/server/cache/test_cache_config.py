"""Cache settings that cannot work are refused at start with one sentence naming the
setting, never echoing a URL's password; without any level there is no cache."""

from __future__ import annotations

import pytest

from ttsfleet_runtime.metrics import RuntimeMetrics
from ttsfleet_runtime.server.response_cache import CacheConfigError, open_cache
from ttsfleet_runtime.settings import ServerSettings

PASSWORD = "hunter2-cache"


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"response_cache_redis_url": f"http://:{PASSWORD}@redis:6379/0"}, "REDIS_URL"),
        ({"response_cache_s3_endpoint": "http://s3.local"}, "--response-cache-s3-bucket"),
        (
            {"response_cache_s3_endpoint": "http://s3.local", "response_cache_s3_bucket": "b"},
            "TTSFLEET_RESPONSE_CACHE_S3_SECRET_KEY",
        ),
    ],
)
def test_unusable_settings_are_refused_by_name(fields, names):
    with pytest.raises(CacheConfigError, match=names) as refused:
        open_cache(ServerSettings(**fields), RuntimeMetrics(lambda: None, lambda: True))
    assert PASSWORD not in str(refused.value)


def test_no_level_no_cache():
    assert open_cache(ServerSettings(), RuntimeMetrics(lambda: None, lambda: True)) is None
