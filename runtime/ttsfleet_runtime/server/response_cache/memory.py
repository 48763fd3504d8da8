"""The pod's own level: cached responses in memory, bounded in bytes, LRU.

Indexed by stored voice as well as by key, so erasing a voice drops its entries
without a scan. Used from the event loop only (the erasure announcements of the
voice store arrive on its threads and are handed to the loop first), so it needs no
lock. Nothing here can be corrupted by another program: entries are kept decoded.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from .entry import CachedResponse
from .key import CacheKey


class MemoryLevel:
    name = "memory"

    def __init__(self, max_bytes: int, on_evicted: Callable[[int], None] = lambda n: None):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._on_evicted = on_evicted
        self._entries: collections.OrderedDict[str, tuple[CacheKey, CachedResponse]] = (
            collections.OrderedDict()
        )
        self._by_voice: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: CacheKey) -> CachedResponse | None:
        found = self._entries.get(key.digest)
        if found is None:
            return None
        self._entries.move_to_end(key.digest)
        return found[1]

    async def put(self, key: CacheKey, entry: CachedResponse) -> None:
        if entry.size > self.max_bytes:
            return
        self._drop(key.digest)
        self._entries[key.digest] = (key, entry)
        self.bytes += entry.size
        if key.voice_id is not None:
            self._by_voice.setdefault(key.voice_id, set()).add(key.digest)
        evicted = 0
        while self.bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)
            evicted += 1
        if evicted:
            self._on_evicted(evicted)

    async def delete(self, key: CacheKey) -> None:
        self._drop(key.digest)

    async def erase_voice(self, voice_id: str) -> None:
        for digest in self._by_voice.pop(voice_id, set()):
            self._drop(digest)

    def clear(self) -> None:
        self._entries.clear()
        self._by_voice.clear()
        self.bytes = 0

    def _drop(self, digest: str) -> None:
        found = self._entries.pop(digest, None)
        if found is None:
            return
        key, entry = found
        self.bytes -= entry.size
        if key.voice_id is not None:
            digests = self._by_voice.get(key.voice_id)
            if digests is not None:
                digests.discard(digest)
                if not digests:
                    del self._by_voice[key.voice_id]
