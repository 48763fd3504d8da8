"""spec.batch: every pod serves the batch API over spec.cache's Redis and bucket; workers
run only on the pools spec.batch names; a batch without that Redis and bucket is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ttsfleet_operator.render import render_fleet
from ttsfleet_runtime.settings import SETTINGS

CACHE = {
    "redis": {"urlSecret": {"name": "redis", "key": "url"}},
    "s3": {
        "endpoint": "https://s3.eu-west-1.amazonaws.com",
        "bucket": "tts-audio",
        "accessKeySecret": {"name": "s3", "key": "id"},
        "secretKeySecret": {"name": "s3", "key": "secret"},
    },
}
WORKERS = SETTINGS["batch_worker_concurrency"].env


def worker_concurrency(service) -> dict[str, str | None]:
    """pool -> the worker concurrency its stable Deployment's pods get."""
    found = {}
    for manifest in render_fleet(service):
        if manifest["kind"] != "Deployment":
            continue
        pool = manifest["metadata"]["labels"]["ttsfleet.io/pool"]
        env = manifest["spec"]["template"]["spec"]["containers"][0]["env"]
        found[pool] = next((e["value"] for e in env if e["name"] == WORKERS), None)
    return found


@pytest.mark.parametrize(
    ("pools", "expected"),
    [
        ("spot", {"spot": "12", "on-demand": "0"}),
        ("on-demand", {"spot": "0", "on-demand": "12"}),
        ("both", {"spot": "12", "on-demand": "12"}),
    ],
)
def test_workers_run_on_the_pools_named(make_service, pools, expected):
    service = make_service(
        replicas=4, spot={"ratio": 0.5}, cache=CACHE, batch={"pools": pools, "concurrency": 12}
    )
    assert worker_concurrency(service) == expected


def test_every_pod_serves_the_batch_api_with_the_lease_given(make_service):
    service = make_service(cache=CACHE, batch={"leaseSeconds": 45.0})
    (config,) = [m for m in render_fleet(service) if m["kind"] == "ConfigMap"]
    assert config["data"][SETTINGS["batch_api"].env] == "on"
    assert config["data"][SETTINGS["batch_lease_s"].env] == "45.0"


def test_without_spec_batch_nothing_is_wired(make_service):
    service = make_service(cache=CACHE)
    (config,) = [m for m in render_fleet(service) if m["kind"] == "ConfigMap"]
    assert not any(name.startswith("TTSFLEET_BATCH") for name in config["data"])
    assert set(worker_concurrency(service).values()) == {None}


def test_a_batch_without_the_caches_redis_and_bucket_is_refused(make_service):
    with pytest.raises(ValidationError, match="batch needs cache.redis and cache.s3"):
        make_service(cache={"redis": CACHE["redis"]}, batch={})
