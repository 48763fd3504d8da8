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
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import threading
import time

import numpy as np

from ..engine import api
from . import errors
from .reference_audio import check_transcript
from .voice_store import Voice, VoiceStore

log = logging.getLogger(__name__)

RECONCILE_S = 5.0
SWEEP_S = 60.0
CACHE_SIZE = 256


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
    ):
        self.store = store
        self.engine = engine
        self.metrics = metrics
        self.cache = PromptCache(cache_size)
        self.reconcile_s = reconcile_s
        self.sweep_s = sweep_s
        store.on_erased(self.cache.forget)

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
        return await asyncio.to_thread(
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
        if entry is not None and not _expired(entry, self.store.clock()):
            self.metrics.voice_cache_lookups.labels(result="hit").inc()
            if entry.owner != owner:
                raise errors.not_found(f"no voice {voice_id!r}")
            return entry.cloned
        self.metrics.voice_cache_lookups.labels(result="miss").inc()
        forgets = self.cache.forgets
        voice, prompt = await asyncio.to_thread(self.store.prompt, voice_id, owner)
        cloned = api.ClonedVoice.from_bytes(prompt)
        self.cache.put(voice_id, _Cached(voice.owner, voice.expires_at, cloned), forgets)
        return cloned

    def reconcile(self) -> None:
        """Forget cached voices the store no longer has (a missed announcement)."""
        if not self.store.watching:
            self.store.watch()
        cached = self.cache.ids()
        if cached:
            for voice_id in set(cached) - self.store.existing(cached):
                self.cache.forget(voice_id)

    def sweep(self) -> None:
        for erased in self.store.erase_expired():
            log.info("expired voice erased", extra={"voice_id": erased.voice_id})

    async def keep(self) -> None:
        """Reconcile and sweep forever (the server runs this as a task)."""
        next_sweep = 0.0
        while True:
            try:
                await asyncio.to_thread(self.reconcile)
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.sweep_s
                    await asyncio.to_thread(self.sweep)
            except Exception as exc:  # the store down: try again next round
                log.warning("voice housekeeping failed", extra={"error": str(exc)})
            await asyncio.sleep(self.reconcile_s)


def _expired(entry: _Cached, now: float) -> bool:
    return entry.expires_at is not None and entry.expires_at <= now
