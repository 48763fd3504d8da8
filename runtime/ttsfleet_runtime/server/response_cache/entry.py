"""One cached response and its stored form.

What a level keeps is the response body exactly as a miss sent it (the whole file,
or the encoded stream's bytes), with what its headers and SSE events say: the audio
seconds, codec frames, sample rate and content type. Stored bytes are trusted no
more than a request: every stored entry carries its body's length and sha256 and
the time it was made, and a read that does not add up (a flipped byte, a truncated
value, another program's key) is `CorruptEntry`, which the cache counts and treats
as a miss; an entry older than its level's TTL is `ExpiredEntry`, a miss too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

MAGIC = b"ttsfleet-response/1\n"
_HEADER_MAX = 4096


class CorruptEntry(Exception):
    """Stored bytes that are not an intact entry."""


class ExpiredEntry(Exception):
    """An intact entry past its level's time to live."""


@dataclasses.dataclass(frozen=True)
class CachedResponse:
    body: bytes
    content_type: str
    sample_rate: int
    audio_s: float
    frames: int
    made_at: float  # unix seconds

    @property
    def size(self) -> int:
        return len(self.body)

    def to_bytes(self) -> bytes:
        header = {
            "length": len(self.body),
            "sha256": hashlib.sha256(self.body).hexdigest(),
            "content_type": self.content_type,
            "sample_rate": self.sample_rate,
            "audio_s": self.audio_s,
            "frames": self.frames,
            "made_at": self.made_at,
        }
        return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + self.body

    @classmethod
    def from_bytes(cls, data: bytes, now: float, ttl_s: float | None) -> CachedResponse:
        """The entry `to_bytes` wrote, checked; raises CorruptEntry or ExpiredEntry."""
        if not data.startswith(MAGIC):
            raise CorruptEntry("no entry header")
        end = data.find(b"\n", len(MAGIC), len(MAGIC) + _HEADER_MAX)
        if end < 0:
            raise CorruptEntry("header not terminated")
        try:
            header = json.loads(data[len(MAGIC) : end])
            entry = cls(
                body=data[end + 1 :],
                content_type=str(header["content_type"]),
                sample_rate=int(header["sample_rate"]),
                audio_s=float(header["audio_s"]),
                frames=int(header["frames"]),
                made_at=float(header["made_at"]),
            )
            length, digest = int(header["length"]), str(header["sha256"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptEntry(f"unreadable header: {exc}") from None
        if len(entry.body) != length:
            raise CorruptEntry(f"body is {len(entry.body)} bytes, the header says {length}")
        if hashlib.sha256(entry.body).hexdigest() != digest:
            raise CorruptEntry("body checksum mismatch")
        if ttl_s is not None and now - entry.made_at > ttl_s:
            raise ExpiredEntry()
        return entry
