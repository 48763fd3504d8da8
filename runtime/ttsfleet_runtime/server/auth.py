"""Bearer API keys: who may call, and the tenant each caller belongs to.

Keys come from a file (a mounted Secret) and/or from settings. Each line of the
file is one key, optionally preceded by its tenant's name:

    # whole-line comments and blank lines are ignored; a UTF-8 BOM is too
    tenant-a: sk-first-key-of-a
    tenant-a: sk-second-key-of-a
    sk-a-key-without-a-name

The colon is required, so that two keys pasted on one line reject the file
instead of making the first a tenant name (which logs print).

A tenant is the stable id that owns uploaded voices and shares a rate-limit
bucket, so rotating a named key (adding the new line, then removing the old)
keeps the tenant's voices. A key without a name is its own tenant,
`key_<first 12 hex of the key's sha256>` (what every key was before names
existed, so voices uploaded then keep their owner). Tenant names match
`TENANT_NAME`; `key_*` and `anonymous` are reserved. With auth disabled every
caller is the one tenant `anonymous`.

Kubernetes swaps a mounted Secret's file when it rotates, so the file is
checked (one stat) on every authentication and re-read when it changed: a key
removed from the file is refused from the next request on. A file that cannot
be read or parsed (missing, not UTF-8, a malformed line) never becomes the key
set: the last good set stays, the rejection is logged (line numbers, never key
material) and counted in `ttsfleet_auth_keys_reload_errors_total`. Keys are
never logged.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from .. import metrics as metric_names
from . import errors

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DERIVED_PREFIX = "key_"


class KeysFileError(ValueError):
    """The keys file cannot become the key set; the message holds no key material."""


def key_id(key: str) -> str:
    """The tenant of a key given without a name."""
    return _DERIVED_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:12]


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_key_line(line: str) -> tuple[str, str]:
    """(tenant, key) of one `KEY` or `TENANT: KEY` entry; ValueError without key material."""
    fields = line.split()
    if len(fields) == 1:
        return key_id(fields[0]), fields[0]
    if len(fields) != 2 or not fields[0].endswith(":"):
        raise ValueError(f"expected 'KEY' or 'TENANT: KEY', found {len(fields)} words")
    tenant, key = fields[0].removesuffix(":"), fields[1]
    if not TENANT_NAME.match(tenant):
        raise ValueError(
            "a tenant name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if tenant == ANONYMOUS or tenant.startswith(_DERIVED_PREFIX):
        raise ValueError(f"tenant names '{ANONYMOUS}' and '{_DERIVED_PREFIX}*' are reserved")
    return tenant, key


def parse_keys(lines: list[str], where: str) -> dict[str, str]:
    """{sha256 of key: tenant} of entries; KeysFileError naming `where` and the line."""
    tenants: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            tenant, key = parse_key_line(line)
        except ValueError as exc:
            raise KeysFileError(f"{where}:{number}: {exc}") from None
        digest = _digest(key)
        if tenants.get(digest, tenant) != tenant:
            raise KeysFileError(f"{where}:{number}: a key listed for two tenants")
        tenants[digest] = tenant
    return tenants


def read_keys_file(path: Path) -> dict[str, str]:
    """{sha256 of key: tenant} of the file, or KeysFileError saying why it is unusable."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeysFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")  # drops a BOM, which would otherwise join the first key
    except UnicodeDecodeError as exc:
        raise KeysFileError(f"{path}: not UTF-8 (byte {exc.start})") from None
    return parse_keys(text.splitlines(), str(path))


def _file_version(path: Path) -> tuple[int, int, int]:
    # A Secret swap changes the inode; an edit in place the mtime or the size.
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


class ApiKeys:
    """The accepted keys and their tenants; `disabled` means auth is off."""

    def __init__(
        self, keys: tuple[str, ...] = (), keys_file: Path | None = None, disabled: bool = False
    ):
        self.disabled = disabled
        self._static = parse_keys(list(keys), "TTSFLEET_API_KEYS")
        self._file = keys_file
        self._file_seen: tuple[int, int, int] | None = None
        self._tenants = dict(self._static)
        # Rejected reloads of the keys file, for /metrics.
        self.reload_errors = 0
        if keys_file is not None:
            self._file_seen = _file_version(keys_file)
            self._tenants = {**read_keys_file(keys_file), **self._static}

    @property
    def count(self) -> int:
        return len(self._tenants)

    def _reload_if_changed(self) -> None:
        if self._file is None:
            return
        try:
            seen = _file_version(self._file)
        except OSError as exc:
            seen, problem = None, f"{self._file}: cannot be read ({exc.strerror or exc})"
        if seen is not None:
            if seen == self._file_seen:
                return
            try:
                tenants = read_keys_file(self._file)
            except KeysFileError as exc:
                problem = str(exc)
            else:
                self._file_seen = seen
                self._tenants = {**tenants, **self._static}
                log.info("api keys reloaded", extra={"keys": self.count})
                return
        elif self._file_seen is None:
            return  # still missing: counted when it went
        # Remember the rejected version: it is counted and logged once.
        self._file_seen = seen
        self.reload_errors += 1
        log.warning("api keys file rejected, keeping the previous keys", extra={"reason": problem})

    def authenticate(self, authorization: str | None) -> str:
        """Return the caller's tenant, or raise 401 with what is wrong."""
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
        found = self._tenants.get(_digest(key))
        if found is None:
            raise errors.unauthorized("invalid API key")
        return found

    def collector(self):
        """A Prometheus collector of `ttsfleet_auth_keys_reload_errors_total`."""
        return _ReloadErrorsCollector(self)


class _ReloadErrorsCollector:
    def __init__(self, keys: ApiKeys):
        self._keys = keys

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily(
            metric_names.AUTH_KEYS_RELOAD_ERRORS.removesuffix("_total"),
            "Keys-file versions rejected (unreadable or malformed); the previous keys stayed",
            value=self._keys.reload_errors,
        )
