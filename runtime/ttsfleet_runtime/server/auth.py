"""Bearer API keys: who may call, and the id under which a caller is counted.

Keys come from a file (a mounted Secret: one key per line, `#` comments) and/or
from settings. Kubernetes rewrites a mounted Secret in place when it rotates,
so the file is re-read when its mtime changes. Keys are never logged: a caller
is known by `key_<sha256 prefix>`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

from . import errors

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"


def key_id(key: str) -> str:
    return "key_" + hashlib.sha256(key.encode()).hexdigest()[:12]


def read_keys_file(path: Path) -> list[str]:
    keys = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line)
    return keys


class ApiKeys:
    """The set of accepted keys; `None` file and no keys means auth is off."""

    RECHECK_EVERY_S = 5.0

    def __init__(self, keys: tuple[str, ...] = (), keys_file: Path | None = None, disabled: bool = False):
        self.disabled = disabled
        self._static = tuple(keys)
        self._file = keys_file
        self._file_mtime: float | None = None
        self._checked_at = 0.0
        self._by_digest: dict[str, str] = {}
        self._load()

    @property
    def count(self) -> int:
        return len(self._by_digest)

    def _load(self) -> None:
        keys = list(self._static)
        if self._file is not None:
            self._file_mtime = self._file.stat().st_mtime
            keys += read_keys_file(self._file)
        self._by_digest = {hashlib.sha256(k.encode()).hexdigest(): key_id(k) for k in keys}

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if self._file is None or now - self._checked_at < self.RECHECK_EVERY_S:
            return
        self._checked_at = now
        try:
            if self._file.stat().st_mtime != self._file_mtime:
                self._load()
                log.info("api keys reloaded", extra={"keys": self.count})
        except OSError as exc:
            # A Secret mid-rotation can be briefly missing: keep the old keys.
            log.warning("api keys file unreadable, keeping previous keys", extra={"error": str(exc)})

    def authenticate(self, authorization: str | None) -> str:
        """Return the caller's id, or raise 401 with what is wrong."""
        if self.disabled:
            return ANONYMOUS
        if not authorization:
            raise errors.unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise errors.unauthorized("malformed Authorization header: expected 'Bearer <key>'")
        return self.authenticate_key(token.strip())

    def authenticate_key(self, key: str) -> str:
        if self.disabled:
            return ANONYMOUS
        self._reload_if_changed()
        found = self._by_digest.get(hashlib.sha256(key.encode()).hexdigest())
        if found is None:
            raise errors.unauthorized("invalid API key")
        return found
