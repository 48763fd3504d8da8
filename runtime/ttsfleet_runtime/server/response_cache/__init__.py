"""The response cache: audio made once for a reproducible request, served again.

Three levels, fastest first: this pod's memory (`memory.py`), the fleet's Redis
(`redis_level.py`) and an S3-compatible bucket (`s3_level.py`, over the small
SigV4 client in `s3_client.py`). `ResponseCache` (`cache.py`) reads through them
and fills the faster ones on a slower hit; `key.py` says what a key is made of and
`entry.py` how an entry is stored (with its length and checksum). The semantics
users rely on are in docs/response-cache.md.
"""

from .cache import CacheConfigError, ResponseCache, open_cache
from .entry import CachedResponse
from .key import CacheKey, cache_key, wants_cache

__all__ = [
    "CacheConfigError",
    "CacheKey",
    "CachedResponse",
    "ResponseCache",
    "cache_key",
    "open_cache",
    "wants_cache",
]
