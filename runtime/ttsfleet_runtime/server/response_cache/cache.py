"""Read through the levels fastest first, fill back on a slower hit, erase by voice.

A level that fails (Redis or S3 down, slow past --response-cache-timeout, an
answer that is no entry) never fails the request: the read goes on to the next
level or ends as a miss, counted per level, with a warning logged at most once a
`WARN_EVERY_S` per level so an outage does not flood the log. A level that failed
is passed over for `RETRY_AFTER_S` (its reads count as misses): an unreachable
Redis costs one request a timeout, not every request. Writes happen only
after a complete, successful response (the route calls `store`), in the
background: the client never waits for a fill.

Erasing a voice (`erase_voice`) drops its entries from every level. Every pod hears
every erasure (the voice store's announcements) and drops its memory entries; the
shared levels are erased by each pod that hears it, an idempotent few calls per
deleted voice. A response still being made for a voice erased meanwhile is not
stored (`_erased` remembers recent erasures); and since voice ids are never reused
and a request resolves its voice before it reads the cache, an entry of an erased
voice that another pod had in memory, or wrote to a shared level in that instant,
can never be read: it only waits for its TTL.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Protocol

from ...settings import ServerSettings
from .entry import CachedResponse, CorruptEntry, ExpiredEntry
from .key import CacheKey
from .memory import MemoryLevel

log = logging.getLogger(__name__)

WARN_EVERY_S = 30.0
RETRY_AFTER_S = 5.0
# Voice ids erased recently, remembered so a response made meanwhile is not stored.
_ERASED_REMEMBERED = 4096


class CacheConfigError(ValueError):
    """The cache's settings cannot be used; the message never repeats a URL or a key."""


class Level(Protocol):
    name: str

    async def get(self, key: CacheKey) -> CachedResponse | None: ...
    async def put(self, key: CacheKey, entry: CachedResponse) -> None: ...
    async def delete(self, key: CacheKey) -> None: ...
    async def erase_voice(self, voice_id: str) -> object: ...


class ResponseCache:
    def __init__(self, levels: list[Level], metrics, *, max_object_bytes: int, timeout_s: float):
        self.levels = levels
        self.metrics = metrics
        self.max_object_bytes = max_object_bytes
        self.timeout_s = timeout_s
        self._warned_at: dict[str, float] = {}
        self._down_until: dict[str, float] = {}
        self._erased: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._tasks: set[asyncio.Task] = set()

    @property
    def memory(self) -> MemoryLevel | None:
        return next((level for level in self.levels if isinstance(level, MemoryLevel)), None)

    def level(self, name: str) -> Level:
        return next(level for level in self.levels if level.name == name)

    async def get(self, key: CacheKey) -> tuple[CachedResponse, str] | None:
        """The entry and the level it came from, or None (a miss)."""
        for depth, level in enumerate(self.levels):
            entry = await self._read(level, key)
            result = "miss" if entry is None else "hit"
            self.metrics.response_cache_lookups.labels(level=level.name, result=result).inc()
            if entry is not None:
                for faster in self.levels[:depth]:
                    self._spawn(self._write(faster, key, entry))
                return entry, level.name
        return None

    def store(self, key: CacheKey, entry: CachedResponse) -> bool:
        """Write a complete response to every level, in the background; False when it is
        not kept (too large, or its voice was erased while it was made)."""
        if entry.size > self.max_object_bytes or key.voice_id in self._erased:
            return False
        for level in self.levels:
            self._spawn(self._write(level, key, entry))
        return True

    async def erase_voice(self, voice_id: str) -> None:
        """Drop a voice's entries from every level (see the module docstring)."""
        self._erased[voice_id] = None
        while len(self._erased) > _ERASED_REMEMBERED:
            self._erased.popitem(last=False)
        for level in self.levels:
            try:
                await asyncio.wait_for(level.erase_voice(voice_id), self.timeout_s * 10)
            except Exception as exc:
                self._failed(level, "erase", exc)
        self._update_memory_gauge()
        log.info("cached responses of an erased voice dropped", extra={"voice_id": voice_id})

    def erase_voice_soon(self, voice_id: str) -> None:
        """`erase_voice` in the background (called on the loop: erasure announcements)."""
        self._spawn(self.erase_voice(voice_id))

    async def settle(self) -> None:
        """Wait for the background writes started so far (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        await self.settle()
        for level in self.levels:
            closer = getattr(level, "close", None)
            if closer is not None:
                await closer()

    def _down(self, level: Level) -> bool:
        return time.monotonic() < self._down_until.get(level.name, 0.0)

    async def _read(self, level: Level, key: CacheKey) -> CachedResponse | None:
        if self._down(level):
            return None
        try:
            return await asyncio.wait_for(level.get(key), self.timeout_s)
        except ExpiredEntry:
            return None
        except CorruptEntry as exc:
            self.metrics.response_cache_corrupt.labels(level=level.name).inc()
            log.warning(
                "a cached response failed its check; treated as a miss and deleted",
                extra={"level": level.name, "key": key.digest, "error": str(exc)},
            )
            self._spawn(self._delete(level, key))
            return None
        except Exception as exc:
            self._failed(level, "read", exc)
            return None

    async def _write(self, level: Level, key: CacheKey, entry: CachedResponse) -> None:
        if self._down(level):
            return
        try:
            await asyncio.wait_for(level.put(key, entry), self.timeout_s * 5)
        except Exception as exc:
            self._failed(level, "write", exc)
            return
        self.metrics.response_cache_stored_bytes.labels(level=level.name).inc(entry.size)
        self._update_memory_gauge()

    async def _delete(self, level: Level, key: CacheKey) -> None:
        try:
            await asyncio.wait_for(level.delete(key), self.timeout_s)
        except Exception as exc:
            self._failed(level, "delete", exc)

    def _failed(self, level: Level, op: str, exc: BaseException) -> None:
        self.metrics.response_cache_errors.labels(level=level.name).inc()
        now = time.monotonic()
        self._down_until[level.name] = now + RETRY_AFTER_S
        if now - self._warned_at.get(level.name, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned_at[level.name] = now
            log.warning(
                "response cache level unavailable; requests go on as misses",
                extra={"level": level.name, "op": op, "error": f"{type(exc).__name__}: {exc}"},
            )

    def _update_memory_gauge(self) -> None:
        memory = self.memory
        if memory is not None:
            self.metrics.response_cache_memory_bytes.set(memory.bytes)

    def _spawn(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def open_cache(settings: ServerSettings, metrics) -> ResponseCache | None:
    """The levels the settings name, fastest first; None when none is configured."""
    levels: list[Level] = []
    if settings.response_cache_memory_bytes > 0:
        levels.append(
            MemoryLevel(
                settings.response_cache_memory_bytes,
                lambda n: metrics.response_cache_evictions.labels(level="memory").inc(n),
            )
        )
    if settings.response_cache_redis_url:
        from .redis_level import RedisLevel

        try:
            levels.append(
                RedisLevel(
                    settings.response_cache_redis_url,
                    settings.response_cache_redis_ttl_s,
                    settings.response_cache_timeout_s,
                )
            )
        except ValueError:  # redis-py's message may quote the URL, password and all
            raise CacheConfigError(
                "TTSFLEET_RESPONSE_CACHE_REDIS_URL is not a Redis URL: use "
                "redis://[:password@]host:port/db or rediss://..."
            ) from None
    if settings.response_cache_s3_endpoint:
        from .s3_client import S3Client
        from .s3_level import S3Level

        if not settings.response_cache_s3_bucket:
            raise CacheConfigError(
                "--response-cache-s3-endpoint needs --response-cache-s3-bucket: name the bucket"
            )
        if not (settings.response_cache_s3_access_key and settings.response_cache_s3_secret_key):
            raise CacheConfigError(
                "the S3 response cache needs TTSFLEET_RESPONSE_CACHE_S3_ACCESS_KEY and "
                "TTSFLEET_RESPONSE_CACHE_S3_SECRET_KEY in the environment (a Secret)"
            )
        client = S3Client(
            settings.response_cache_s3_endpoint,
            settings.response_cache_s3_bucket,
            settings.response_cache_s3_access_key,
            settings.response_cache_s3_secret_key,
            settings.response_cache_s3_region,
            timeout_s=settings.response_cache_timeout_s * 5,
        )
        levels.append(
            S3Level(
                client,
                settings.response_cache_s3_prefix,
                settings.response_cache_s3_ttl_days * 86_400,
            )
        )
    if not levels:
        return None
    return ResponseCache(
        levels,
        metrics,
        max_object_bytes=settings.response_cache_max_object_bytes,
        timeout_s=settings.response_cache_timeout_s,
    )
