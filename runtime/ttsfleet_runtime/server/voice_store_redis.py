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
from .voice_store import Erased, Voice, VoiceQuota, VoiceRecord, VoiceStore

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
    """Redis failures (down, timed out, refused auth) become a 503 that says only that."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        import redis

        try:
            return method(*args, **kwargs)
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
    ) -> RedisVoiceStore:
        import redis

        if urllib.parse.urlsplit(url).scheme not in SCHEMES:
            raise StoreUrlError("the voice store URL must start with redis:// or rediss://")
        try:
            client = redis.Redis.from_url(
                url, socket_timeout=5, socket_connect_timeout=5, health_check_interval=30
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
                    ids = [i.decode() for i in pipe.smembers(owner_key(voice.owner))]
                    current = [v for i in ids if (v := self._load(i, pipe)) and not self.expired(v)]
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
        owner = owner or _text(self.client.hget(OWNERS, voice_id))
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
        return sorted(i.decode() for i in members)

    @_reachable
    def _load(self, voice_id: str, conn=None) -> Voice | None:
        raw = (conn or self.client).hget(voice_key(voice_id), "profile")
        return None if raw is None else Voice.from_profile(json.loads(raw))

    @_reachable
    def _read(self, voice_id: str, *parts: str) -> dict[str, bytes] | None:
        values = self.client.hmget(voice_key(voice_id), [p for p in parts if p in _PARTS])
        if any(v is None for v in values):
            return None
        return dict(zip(parts, values, strict=True))

    @_reachable
    def expired_ids(self, now: float) -> list[str]:
        return sorted(i.decode() for i in self.client.zrangebyscore(EXPIRY, "-inf", now))

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
            self._announce_erased(_text(message["data"]))

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


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()
