"""Stored voices in Redis: one store per TTSService, shared by every replica.

Keys (all under `ttsfleet:voices:`):
- `voice:<id>`: a hash of the voice's four parts (profile, audio, consent,
  prompt), expiring at the voice's expiry (PEXPIREAT), so Redis itself erases
  an expired voice even if no pod ever sweeps;
- `owner:<owner>`: the set of the owner's voice ids (listing, quotas);
- `owners`: voice id -> owner, and `expiry`: voice id scored by its expiry:
  the indexes the sweeper (`erase_expired`) reads to remove what key TTLs
  left behind in the owner sets.

An upload is one MULTI/EXEC under WATCH of the owner's set: the quota is
checked and the voice written in one step, even for uploads through different
pods at once (a concurrent change of the set retries the check). An erasure is
one transaction too, then a PUBLISH on `ttsfleet:voices:erased`; every pod
subscribes (a thread of `watch()`) and drops the voice from its cache, and its
periodic reconciliation catches a message lost in a reconnect.

Everything read back is checked (voice_store.py): a hash field that is not
a profile, a voice key of another type (WRONGTYPE), an index member that is
not a voice id (not UTF-8, say) is skipped and reported, never fatal to its
tenant; the sweeper and a tenant's erasure also remove such index members.

The URL may carry a password: it is never logged nor put into an error; what
is shown is `describe()`, the URL without its credentials.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable

from . import errors
from .voice_store import (
    BrokenRecord,
    Erased,
    Voice,
    VoiceQuota,
    VoiceRecord,
    VoiceStore,
    is_voice_id,
    storage_full,
)

log = logging.getLogger(__name__)

PREFIX = "ttsfleet:voices:"
ERASED_CHANNEL = PREFIX + "erased"
OWNERS = PREFIX + "owners"
EXPIRY = PREFIX + "expiry"
SCHEMES = ("redis", "rediss")
_PARTS = ("audio", "consent", "prompt")


def voice_key(voice_id: str) -> str:
    return f"{PREFIX}voice:{voice_id}"


def owner_key(owner: str) -> str:
    return f"{PREFIX}owner:{owner}"


class StoreUrlError(ValueError):
    """The store URL cannot be used; the message never repeats the URL."""


def redacted(url: str) -> str:
    """The URL without user and password: what logs and errors may show."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def unavailable(exc: Exception) -> errors.ApiError:
    log.warning("voice store unreachable", extra={"error": type(exc).__name__})
    return errors.unavailable(
        "the voice store is unreachable; retry", code="voice_store_unavailable"
    )


def _reachable(method):
    """Redis failures (down, timed out, refused auth) become a 503 that says only that;
    Redis at its memory limit (it refuses writes, answers reads) a 507 that says so."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        import redis

        try:
            return method(*args, **kwargs)
        except redis.OutOfMemoryError:
            log.warning("voice store full: Redis refuses writes at its maxmemory")
            raise storage_full("Redis is at its memory limit") from None
        except redis.RedisError as exc:
            raise unavailable(exc) from None

    return wrapper


class RedisVoiceStore(VoiceStore):
    def __init__(
        self,
        client,
        where: str,
        quota: VoiceQuota | None = None,
        retention_s: float = 0.0,
        clock: Callable[[], float] = time.time,
    ):
        super().__init__(quota, retention_s, clock)
        self.client = client
        self._where = where
        self._pubsub = None
        self._watcher: threading.Thread | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        quota: VoiceQuota | None = None,
        retention_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        *,
        timeout_s: float = 5.0,
    ) -> RedisVoiceStore:
        """`timeout_s` is the server's bound on a call (voice_library.StoreLanes); the
        socket's is a second longer, so a caller hears that bound, and a thread of a
        call the server gave up on is free again soon after."""
        import redis

        if urllib.parse.urlsplit(url).scheme not in SCHEMES:
            raise StoreUrlError("the voice store URL must start with redis:// or rediss://")
        try:
            client = redis.Redis.from_url(
                url,
                socket_timeout=timeout_s + 1.0,
                socket_connect_timeout=timeout_s + 1.0,
                health_check_interval=30,
            )
        except ValueError:
            raise StoreUrlError("the voice store URL is malformed") from None
        return cls(client, redacted(url), quota, retention_s, clock)

    def describe(self) -> str:
        return f"redis {self._where}"

    # Writing.

    @_reachable
    def _commit(self, record: VoiceRecord) -> None:
        import redis

        voice = record.voice
        fields = {
            "profile": json.dumps(voice.profile()),
            "audio": record.audio_wav,
            "consent": json.dumps(record.consent),
            "prompt": record.prompt,
        }
        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(owner_key(voice.owner))
                    ids = self._member_ids(pipe.smembers(owner_key(voice.owner)))
                    current = [
                        v
                        for i in ids
                        if (v := self._load_readable(i, pipe)) and not self.expired(v)
                    ]
                    self._check_quota(current, adding_bytes=voice.stored_bytes)
                    pipe.multi()
                    pipe.hset(voice_key(voice.id), mapping=fields)
                    if voice.expires_at is not None:
                        pipe.pexpireat(voice_key(voice.id), int(voice.expires_at * 1000) + 1)
                        pipe.zadd(EXPIRY, {voice.id: voice.expires_at})
                    pipe.sadd(owner_key(voice.owner), voice.id)
                    pipe.hset(OWNERS, voice.id, voice.owner)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue  # the owner's set changed while checking: check again

    @_reachable
    def _erase(self, voice_id: str, owner: str | None) -> Erased:
        owner = owner or self._indexed_owner(voice_id)
        with self.client.pipeline() as pipe:  # MULTI/EXEC
            pipe.delete(voice_key(voice_id))
            if owner is not None:
                pipe.srem(owner_key(owner), voice_id)
            pipe.hdel(OWNERS, voice_id)
            pipe.zrem(EXPIRY, voice_id)
            pipe.execute()
        self.client.publish(ERASED_CHANNEL, voice_id)
        return Erased(voice_id, owner, voice_key(voice_id))

    # Reading.

    @_reachable
    def _ids(self, owner: str | None) -> list[str]:
        members = (
            self.client.hkeys(OWNERS) if owner is None else self.client.smembers(owner_key(owner))
        )
        return self._member_ids(members)

    def _member_ids(self, members: Iterable[bytes]) -> list[str]:
        """The voice ids among an index's members; the others are skipped and reported."""
        ids = []
        for member in members:
            voice_id = _member_id(member)
            if voice_id is None:
                shown = member.decode(errors="backslashreplace")[:80]
                self.report_broken(
                    BrokenRecord(shown, "index", "an index member that is no voice id")
                )
            else:
                ids.append(voice_id)
        return sorted(ids)

    @_reachable
    def _load(self, voice_id: str, conn=None) -> Voice | None:
        import redis

        try:
            raw = (conn or self.client).hget(voice_key(voice_id), "profile")
        except redis.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            raise BrokenRecord(voice_id, "wrong_type", "the key is not a hash") from None
        if raw is None:
            return None
        try:
            profile = json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8
            raise BrokenRecord(voice_id, "profile", "not JSON") from None
        return Voice.from_profile(profile, voice_id)

    def _load_readable(self, voice_id: str, conn=None) -> Voice | None:
        try:
            return self._load(voice_id, conn)
        except BrokenRecord as broken:
            self.report_broken(broken)
            return None

    @_reachable
    def _indexed_owner(self, voice_id: str) -> str | None:
        owner = self.client.hget(OWNERS, voice_id)
        try:
            return None if owner is None else owner.decode()
        except UnicodeDecodeError:
            return None

    @_reachable
    def _read(self, voice_id: str, *parts: str) -> dict[str, bytes] | None:
        import redis

        try:
            values = self.client.hmget(voice_key(voice_id), [p for p in parts if p in _PARTS])
        except redis.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            return None  # a key of another type holds no voice (`_load` reports it)
        if any(v is None for v in values):
            return None
        return dict(zip(parts, values, strict=True))

    @_reachable
    def expired_ids(self, now: float) -> list[str]:
        members = self.client.zrangebyscore(EXPIRY, "-inf", now)
        junk = [m for m in members if _member_id(m) is None]
        if junk:  # they identify no voice: the index is all that is stored of them
            self.client.zrem(EXPIRY, *junk)
        return self._member_ids(members)

    @_reachable
    def erase_owner(self, owner: str) -> list[Erased]:
        erased = super().erase_owner(owner)
        junk = [m for m in self.client.smembers(owner_key(owner)) if _member_id(m) is None]
        if junk:
            self.client.srem(owner_key(owner), *junk)
        return erased

    @_reachable
    def existing(self, voice_ids: Iterable[str]) -> set[str]:
        voice_ids = list(voice_ids)
        with self.client.pipeline(transaction=False) as pipe:
            for voice_id in voice_ids:
                pipe.exists(voice_key(voice_id))
            found = pipe.execute()
        return {i for i, n in zip(voice_ids, found, strict=True) if n}

    # Hearing about erasures through other pods.

    def watch(self) -> None:
        """Subscribe to erasures (a daemon thread): each one reaches `on_erased` listeners."""
        import redis

        def on_message(message) -> None:
            voice_id = _member_id(message["data"])
            if voice_id is not None:  # anything else names no voice a cache could hold
                self._announce_erased(voice_id)

        def on_failure(exc, pubsub, thread) -> None:
            # The thread stops; reconciliation covers the gap until it is restarted.
            log.warning("voice store subscription lost", extra={"error": type(exc).__name__})
            pubsub.close()
            self._watcher = None

        try:
            self._pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            self._pubsub.subscribe(**{ERASED_CHANNEL: on_message})
            self._watcher = self._pubsub.run_in_thread(
                sleep_time=0.2, daemon=True, exception_handler=on_failure
            )
        except redis.RedisError as exc:
            log.warning("voice store subscription failed", extra={"error": type(exc).__name__})

    @property
    def watching(self) -> bool:
        return self._watcher is not None and self._watcher.is_alive()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.join(timeout=2)
            self._watcher = None
        self.client.close()


def _member_id(member: bytes) -> str | None:
    """The voice id an index member names, or None for junk."""
    try:
        text = member.decode()
    except UnicodeDecodeError:
        return None
    return text if is_voice_id(text) else None
