"""Cloned voices as the server uses them: computed once, cached, forgotten on erasure.

Cloning (`clone_voice`): decoded reference audio -> `engine.clone_voice` in a
worker thread, timed into `ttsfleet_voice_clone_seconds{source}`. An upload
("upload") is cloned once and the store keeps the prompt next to the audio and
the consent record; a one-shot reference in a speech request ("request") is
cloned for that request and never stored.

Speaking a stored voice: voice id -> `ClonedVoice` from a bounded LRU cache of
prompts (`ttsfleet_voice_cache_lookups_total{result}`); a miss reads the prompt
from the store once. Neither costs encoder work.

How long a pod may go on speaking a voice that is gone: the store announces
every erasure (Redis: every pod's, by pub/sub) and the cache forgets the voice
at once; every `RECONCILE_S` the cache also asks the store which of its voices
still exist, so an announcement lost in a reconnect costs at most that long.
A cached voice is never served past its expiry. Every `SWEEP_S` the store
erases expired voices (audio, prompt, consent record, index entries).
While the store cannot be reached no erasure is heard, so a cached voice is
spoken at most `stale_s` (--voice-cache-stale) after the last reconciliation
that reached the store (reconciliations run at least three times within it);
past that the cache is bypassed, and the store's answer (a 503 while it is
away) decides.

Every store call runs in a bounded pool of threads of its own lane (`StoreLanes`:
speech lookups, the voice routes, housekeeping), never in asyncio's default
pool, and is awaited at most `timeout_s` (--voice-store-timeout): a frozen
store costs a caller a bounded wait and a 503 + Retry-After, and cannot starve
one-shot cloning, reference decoding or another lane's callers.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from ..engine import api
from . import errors
from .reference_audio import check_transcript
from .voice_store import BrokenRecord, Erased, Voice, VoiceExport, VoiceStore

log = logging.getLogger(__name__)

RECONCILE_S = 5.0
SWEEP_S = 60.0
CACHE_SIZE = 256
STORE_TIMEOUT_S = 5.0
CACHE_STALE_S = 30.0
# Threads per lane: enough for a pod's concurrent store calls (each is a round trip
# of about a millisecond), few enough that a frozen store holds only these.
LANE_THREADS = {"lookup": 4, "routes": 4, "housekeeping": 1}


class StoreLanes:
    """Bounded thread pools for blocking store calls, one per lane, each call of a
    request awaited at most `timeout_s` (see the module docstring). Housekeeping
    waits for its calls however long a sweep of many voices takes: no request waits
    on it, and each of its store operations has the store's own socket timeout."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._pools = {
            lane: concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix=f"voice-{lane}")
            for lane, n in LANE_THREADS.items()
        }

    async def call(self, lane: str, fn: Callable, *args, **kwargs):
        loop = asyncio.get_running_loop()
        pending = loop.run_in_executor(self._pools[lane], functools.partial(fn, *args, **kwargs))
        if lane == "housekeeping":
            return await pending
        try:
            return await asyncio.wait_for(pending, self.timeout_s)
        except TimeoutError:
            # A call still queued is dropped; one running ends at Redis' socket timeout.
            log.warning("voice store call timed out", extra={"lane": lane, "call": fn.__name__})
            raise errors.unavailable(
                f"the voice store did not answer within {self.timeout_s:g} s; retry",
                code="voice_store_unavailable",
            ) from None

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


async def clone_voice(
    engine: api.Engine,
    metrics,
    pcm: np.ndarray,
    transcript: str,
    source: str,
    fields: str = "",
) -> api.ClonedVoice:
    """The engine's clone of a decoded reference (blocking work off the event loop).
    A refusal is a 400 naming the request's field: `fields` + "audio" or "transcript"
    (`fields` is "voice_clone." for a speech request's own reference)."""
    check_transcript(transcript, len(pcm) / engine.info.sample_rate, fields + "transcript")
    started = time.monotonic()
    try:
        cloned = await asyncio.to_thread(
            engine.clone_voice, pcm, engine.info.sample_rate, transcript
        )
    except api.InvalidRequest as exc:
        # The engine names its own arguments: only its transcript is not the audio.
        part = "transcript" if exc.param == "transcript" else "audio"
        raise errors.invalid_request(str(exc), param=fields + part) from None
    metrics.voice_clone.labels(source=source).observe(time.monotonic() - started)
    return cloned


@dataclasses.dataclass(frozen=True)
class _Cached:
    owner: str
    expires_at: float | None
    cloned: api.ClonedVoice


class PromptCache:
    """Voice id -> cloned voice, least recently used first out, thread-safe
    (erasures are announced from the store's subscriber thread)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries: collections.OrderedDict[str, _Cached] = collections.OrderedDict()
        self._lock = threading.Lock()
        # Bumped by every forget: a load that began before one must not cache its result.
        self.forgets = 0

    def get(self, voice_id: str) -> _Cached | None:
        with self._lock:
            entry = self._entries.get(voice_id)
            if entry is not None:
                self._entries.move_to_end(voice_id)
            return entry

    def put(self, voice_id: str, entry: _Cached, forgets_before: int) -> None:
        with self._lock:
            if self.forgets != forgets_before:
                return  # something was erased meanwhile, perhaps this voice
            self._entries[voice_id] = entry
            self._entries.move_to_end(voice_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def forget(self, voice_id: str) -> None:
        with self._lock:
            self.forgets += 1
            self._entries.pop(voice_id, None)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._entries)


class VoiceLibrary:
    """The store, the engine that clones and the prompt cache, for the routes."""

    def __init__(
        self,
        store: VoiceStore,
        engine: api.Engine,
        metrics,
        *,
        cache_size: int = CACHE_SIZE,
        reconcile_s: float = RECONCILE_S,
        sweep_s: float = SWEEP_S,
        timeout_s: float = STORE_TIMEOUT_S,
        stale_s: float = CACHE_STALE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.engine = engine
        self.metrics = metrics
        self.cache = PromptCache(cache_size)
        # Reconciling three times within the stale bound keeps a reachable store's
        # cache current even when one reconciliation is slow or fails.
        self.reconcile_s = min(reconcile_s, stale_s / 3)
        self.sweep_s = sweep_s
        self.stale_s = stale_s
        self.lanes = StoreLanes(timeout_s)
        self._monotonic = monotonic
        # When a reconciliation last reached the store: what the cache's entries are
        # known to be true as of (an empty cache is true now).
        self._store_reached_at = monotonic()
        store.on_erased(self.cache.forget)
        store.on_record_skipped(
            lambda reason: metrics.voice_records_skipped.labels(reason=reason).inc()
        )

    def close(self) -> None:
        self.lanes.close()
        self.store.close()

    # The routes' store calls, each bounded (see StoreLanes).

    async def list(self, owner: str) -> list[Voice]:
        return await self.lanes.call("routes", self.store.list, owner)

    async def get(self, voice_id: str, owner: str) -> Voice:
        return await self.lanes.call("routes", self.store.get, voice_id, owner)

    async def export(self, voice_id: str, owner: str) -> VoiceExport:
        return await self.lanes.call("routes", self.store.export, voice_id, owner)

    async def delete(self, voice_id: str, owner: str) -> Erased:
        return await self.lanes.call("routes", self.store.delete, voice_id, owner)

    async def check_quota(self, owner: str) -> None:
        await self.lanes.call("routes", self.store.check_quota, owner)

    async def add(
        self,
        pcm: np.ndarray,
        *,
        name: str,
        transcript: str,
        language: str,
        owner: str,
        consent_statement: str,
    ) -> Voice:
        """Clone the reference once and store it with its audio and consent record."""
        cloned = await clone_voice(self.engine, self.metrics, pcm, transcript, source="upload")
        return await self.lanes.call(
            "routes",
            self.store.create,
            pcm=pcm,
            sample_rate=self.engine.info.sample_rate,
            name=name,
            transcript=transcript,
            language=language,
            owner=owner,
            consent_statement=consent_statement,
            prompt=cloned.to_bytes(),
        )

    async def cloned_voice(self, voice_id: str, owner: str) -> api.ClonedVoice:
        """The owner's stored voice ready to speak, or the store's 404."""
        entry = self.cache.get(voice_id)
        if entry is not None and not _expired(entry, self.store.clock()) and self.cache_current():
            self.metrics.voice_cache_lookups.labels(result="hit").inc()
            if entry.owner != owner:
                raise errors.not_found(f"no voice {voice_id!r}")
            return entry.cloned
        self.metrics.voice_cache_lookups.labels(result="miss").inc()
        forgets = self.cache.forgets
        voice, prompt = await self.lanes.call("lookup", self.store.prompt, voice_id, owner)
        try:
            cloned = api.ClonedVoice.from_bytes(prompt)
        except Exception as exc:  # whatever numpy's loader raises on bytes that are no prompt
            self.store.report_broken(BrokenRecord(voice_id, "prompt", type(exc).__name__))
            raise errors.not_found(f"no voice {voice_id!r}") from None
        self.cache.put(voice_id, _Cached(voice.owner, voice.expires_at, cloned), forgets)
        return cloned

    def cache_current(self) -> bool:
        """Whether cached voices may be spoken: the store was reached recently enough
        that an erasure made elsewhere cannot have gone unheard for longer than stale_s."""
        return self._monotonic() - self._store_reached_at <= self.stale_s

    def reconcile(self) -> None:
        """Forget cached voices the store no longer has (a missed announcement)."""
        began = self._monotonic()
        if not self.store.watching:
            self.store.watch()
        cached = self.cache.ids()
        if cached:  # (an empty cache holds nothing that could be stale)
            for voice_id in set(cached) - self.store.existing(cached):
                self.cache.forget(voice_id)
        self._store_reached_at = began

    def sweep(self) -> None:
        for erased in self.store.erase_expired():
            log.info("expired voice erased", extra={"voice_id": erased.voice_id})

    async def keep(self) -> None:
        """Reconcile and sweep forever (the server runs this as a task)."""
        next_sweep = 0.0
        while True:
            try:
                await self.lanes.call("housekeeping", self.reconcile)
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.sweep_s
                    await self.lanes.call("housekeeping", self.sweep)
            except Exception as exc:  # the store down: try again next round
                log.warning("voice housekeeping failed", extra={"error": str(exc)})
            await asyncio.sleep(self.reconcile_s)


def _expired(entry: _Cached, now: float) -> bool:
    return entry.expires_at is not None and entry.expires_at <= now
