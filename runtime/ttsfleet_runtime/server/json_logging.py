"""One JSON object per log line, with the request id when there is one.

Log collectors (Loki, Cloud Logging, ...) index these fields; `extra={...}` on
a log call adds fields. uvicorn's own loggers go through the same formatter.

Secrets never reach a line: whatever logged it (uvicorn's WebSocket line
carries the URL, and browsers put their key in `?api_key=`), the formatter
masks credential-like query parameters and Authorization values in the
message, in every string field and in tracebacks.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
# `?api_key=...`, `&token=...`, `access_token`, `x-api-key`, `password`, `sig`, ...
# The name is matched decoded: the server decodes `?api%5Fkey=` or `?%61pi_key=`
# to `api_key` and authenticates with it, so the log must mask it too.
_QUERY_PARAM = re.compile(r"(?P<name>[?&;](?P<key>[\w.~%+-]*)=)[^&;\s\"'#]*")
_SECRET_NAME = re.compile(
    r"key|token|secret|password|passwd|auth|signature|sig|credential", re.IGNORECASE
)
# `Authorization: Bearer ...`, `Basic ...`, and the header named with any value.
_SECRET_SCHEME = re.compile(r"(?P<name>\b(?:bearer|basic)\s+)[^\s\"',;]+", re.IGNORECASE)
_SECRET_HEADER = re.compile(
    r"(?P<name>\b(?:authorization|x-api-key|api[_-]key)[\"']?\s*[:=]\s*[\"']?)(?!bearer\b|basic\b)[^\s\"',;&]+",
    re.IGNORECASE,
)


def _secret_name(name: str) -> bool:
    for _ in range(3):  # %2561 is %61 is a: decode until nothing changes
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    return _SECRET_NAME.search(name) is not None


def _mask_param(match: re.Match) -> str:
    return match.group("name") + REDACTED if _secret_name(match.group("key")) else match.group(0)


def redact(text: str) -> str:
    """`text` with credentials masked (the names stay, so the line still says what was sent)."""
    text = _QUERY_PARAM.sub(_mask_param, text)
    for pattern in (_SECRET_SCHEME, _SECRET_HEADER):
        text = pattern.sub(lambda m: m.group("name") + REDACTED, text)
    return text


def _redacted(value):
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    return value


# Attributes every LogRecord has; anything else came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                entry[key] = _redacted(value)
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, default=lambda v: redact(str(v)))


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
