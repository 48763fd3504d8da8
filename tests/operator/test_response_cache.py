"""spec.cache: the cache's plain settings reach the pods through the engine ConfigMap, its
Redis URL and S3 keys only from their Secrets, and a cache with no level is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ttsfleet_operator.render import render_fleet
from ttsfleet_runtime.settings import SETTINGS

REDIS_URL = {"name": "cache-redis", "key": "url"}
ACCESS = {"name": "cache-s3", "key": "accessKeyId"}
SECRET = {"name": "cache-s3", "key": "secretAccessKey"}
S3 = {
    "endpoint": "https://s3.eu-west-1.amazonaws.com",
    "bucket": "tts-cache",
    "accessKeySecret": ACCESS,
    "secretKeySecret": SECRET,
}
FULL = {"memory": "512Mi", "redis": {"urlSecret": REDIS_URL, "ttlSeconds": 3600.0}, "s3": S3}


def rendered(service, kind: str) -> dict:
    (manifest,) = [m for m in render_fleet(service) if m["kind"] == kind]
    return manifest


def runtime_env(service) -> list[dict]:
    return rendered(service, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]


def config(service) -> dict[str, str]:
    return rendered(service, "ConfigMap")["data"]


def env_name(setting: str) -> str:
    return SETTINGS[setting].env


def test_the_secrets_come_from_their_secret_keys_never_the_configmap(make_service):
    service = make_service(cache=FULL)
    env = runtime_env(service)
    for setting, ref in [
        ("response_cache_redis_url", REDIS_URL),
        ("response_cache_s3_access_key", ACCESS),
        ("response_cache_s3_secret_key", SECRET),
    ]:
        assert {"name": env_name(setting), "valueFrom": {"secretKeyRef": ref}} in env
        assert env_name(setting) not in config(service)


def test_sizes_ttls_and_the_bucket_reach_the_configmap(make_service):
    data = config(make_service(cache=FULL))
    assert data[env_name("response_cache_memory_bytes")] == str(512 * 1024 * 1024)
    assert data[env_name("response_cache_redis_ttl_s")] == "3600.0"
    assert data[env_name("response_cache_s3_endpoint")] == S3["endpoint"]
    assert data[env_name("response_cache_s3_bucket")] == "tts-cache"
    assert (
        data[env_name("response_cache_s3_prefix")] == SETTINGS["response_cache_s3_prefix"].default
    )
    assert float(data[env_name("response_cache_s3_ttl_days")]) == 30.0


def test_a_memory_only_cache_wires_no_secret(make_service):
    service = make_service(cache={"memory": "64Mi"})
    names = {e["name"] for e in runtime_env(service)}
    assert env_name("response_cache_redis_url") not in names
    assert env_name("response_cache_s3_access_key") not in names
    assert config(service)[env_name("response_cache_memory_bytes")] == str(64 * 1024 * 1024)
    assert env_name("response_cache_s3_endpoint") not in config(service)


def test_without_a_cache_nothing_is_wired(make_service):
    service = make_service()
    assert not any(name.startswith("TTSFLEET_RESPONSE_CACHE") for name in config(service))
    assert not any(e["name"].startswith("TTSFLEET_RESPONSE_CACHE") for e in runtime_env(service))


def test_a_cache_without_a_level_is_refused(make_service):
    with pytest.raises(ValidationError, match="cache needs a level"):
        make_service(cache={"memory": "0"})


@pytest.mark.parametrize(
    ("s3", "fragment"),
    [
        ({**S3, "endpoint": "s3.amazonaws.com"}, "endpoint"),
        ({**S3, "bucket": "Bad_Bucket"}, "bucket"),
        ({**S3, "ttlDays": 0.0}, "ttlDays"),
    ],
)
def test_a_bucket_the_runtime_could_not_use_is_refused(make_service, s3, fragment):
    with pytest.raises(ValidationError, match=fragment):
        make_service(cache={"s3": s3})


def test_the_redis_ttl_has_the_runtimes_bounds(make_service):
    with pytest.raises(ValidationError, match="ttlSeconds"):
        make_service(cache={"redis": {"urlSecret": REDIS_URL, "ttlSeconds": 1.0}})
