"""Batch synthesis jobs: OpenAI's `/v1/files` + `/v1/batches` for speech, run on spare capacity.

`routes.py` is the API, `jobs.py` what a batch is to its users (input lines checked,
OpenAI's objects, the output and error files), `store.py` where batches live (state
and work queue in Redis, files and audio in the bucket, every item's change one Lua
script with a fencing token) and `worker.py` the low-priority worker in each pod.
The semantics users rely on are in docs/batch.md.
"""

from __future__ import annotations

import os
import socket

from ..response_cache import CacheConfigError
from .store import BatchStore


def open_batches(settings) -> BatchStore | None:
    """The fleet's batch store (the response cache's Redis and bucket); None when off."""
    if not settings.batch_api:
        return None
    if not (settings.response_cache_redis_url and settings.response_cache_s3_endpoint):
        raise CacheConfigError(
            "--batch-api needs the response cache's Redis and S3 (TTSFLEET_RESPONSE_CACHE_REDIS_URL "
            "and --response-cache-s3-endpoint): batches keep their state and audio there"
        )
    if not (settings.response_cache_s3_access_key and settings.response_cache_s3_secret_key):
        raise CacheConfigError(
            "--batch-api needs TTSFLEET_RESPONSE_CACHE_S3_ACCESS_KEY and "
            "TTSFLEET_RESPONSE_CACHE_S3_SECRET_KEY in the environment (a Secret)"
        )
    import redis.asyncio

    from ..response_cache.s3_client import S3Client

    s3 = S3Client(
        settings.response_cache_s3_endpoint,
        settings.response_cache_s3_bucket,
        settings.response_cache_s3_access_key,
        settings.response_cache_s3_secret_key,
        settings.response_cache_s3_region,
        timeout_s=30.0,
    )
    try:
        client = redis.asyncio.Redis.from_url(settings.response_cache_redis_url, socket_timeout=10)
    except ValueError:  # redis-py's message may quote the URL, password and all
        raise CacheConfigError(
            "TTSFLEET_RESPONSE_CACHE_REDIS_URL is not a Redis URL: use "
            "redis://[:password@]host:port/db or rediss://..."
        ) from None
    worker = f"{socket.gethostname()}:{os.getpid()}"
    return BatchStore(client, s3, settings.batch_s3_prefix, worker)


__all__ = ["BatchStore", "open_batches"]
