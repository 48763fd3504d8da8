"""Structured logs: one JSON object per line, `extra=` fields included."""

from __future__ import annotations

import json
import logging

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# kopf attaches its whole settings object and internal flags to every record.
_DROPPED = {"settings", "k8s_skip"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            {
                key: value
                for key, value in vars(record).items()
                if key not in _STANDARD and key not in _DROPPED
            }
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: int) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kopf reports every successful handler call at INFO: one line per watch event.
    logging.getLogger("kopf.objects").setLevel(level if level <= logging.DEBUG else logging.WARNING)
    # celpy logs every value a CEL rule sees at DEBUG: whole specs, runtime.env's values
    # (tokens) included. Never, not even with -v.
    logging.getLogger("celpy").setLevel(logging.WARNING)
