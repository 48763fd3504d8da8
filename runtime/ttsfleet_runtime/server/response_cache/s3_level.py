"""The long level: cached responses as objects in an S3-compatible bucket.

Object names put what must be erased together under one prefix: a stored voice's
entries under `<prefix>/voice/<voice id>/` (erasing the voice lists and deletes
that prefix), every other entry under `<prefix>/tenant/<tenant digest>/`. The TTL
is checked on every read against the entry's own `made_at` (inside its checksum,
so no metadata the server might drop decides it): an older entry is a miss and is
deleted. What nobody reads again is removed by the bucket's lifecycle rule of the
same number of days (docs/response-cache.md): S3 expires objects itself, for free
and without a sweeper that N pods would each run.
"""

from __future__ import annotations

import hashlib
import time

from .entry import CachedResponse, ExpiredEntry
from .key import CacheKey
from .s3_client import S3Client


def tenant_digest(tenant: str) -> str:
    # A tenant id is any string an operator chose; a digest is always a safe name.
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


class S3Level:
    name = "s3"

    def __init__(self, client: S3Client, prefix: str, ttl_s: float):
        self.client = client
        self.prefix = prefix.strip("/")
        self.ttl_s = ttl_s

    def object_name(self, key: CacheKey) -> str:
        if key.voice_id is not None:
            return f"{self.voice_prefix(key.voice_id)}{key.digest}"
        return f"{self.prefix}/tenant/{tenant_digest(key.tenant)}/{key.digest}"

    def voice_prefix(self, voice_id: str) -> str:
        return f"{self.prefix}/voice/{voice_id}/"

    async def get(self, key: CacheKey) -> CachedResponse | None:
        data = await self.client.get(self.object_name(key))
        if data is None:
            return None
        try:
            return CachedResponse.from_bytes(data, time.time(), self.ttl_s)
        except ExpiredEntry:
            await self.client.delete(self.object_name(key))
            raise

    async def put(self, key: CacheKey, entry: CachedResponse) -> None:
        await self.client.put(self.object_name(key), entry.to_bytes())

    async def delete(self, key: CacheKey) -> None:
        await self.client.delete(self.object_name(key))

    async def erase_voice(self, voice_id: str) -> int:
        names = await self.client.list_keys(self.voice_prefix(voice_id))
        for name in names:
            await self.client.delete(name)
        return len(names)

    async def close(self) -> None:
        await self.client.close()
