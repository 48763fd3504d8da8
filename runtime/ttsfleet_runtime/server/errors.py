"""API errors as clients see them: an HTTP status and an OpenAI-shaped body.

OpenAI SDKs read `{"error": {"message", "type", "param", "code"}}`, so every
refusal the server makes, from a bad field to a full queue, has that shape:
also the framework's own (unknown route, wrong method, unparsable body) and
uvicorn's (malformed request, oversized head, slow head; see serve.py).
Messages are for people: a Python object's repr that slipped into one (a
library's error naming `<_io.BytesIO object at 0x...>`) is replaced.
"""

from __future__ import annotations

import math
import re
from http import HTTPStatus

# `<_io.BytesIO object at 0x7f...>`, `<function f at 0x...>`: internal detail, no help to a client.
_OBJECT_REPR = re.compile(r"<[^<>]{1,200}? at 0x[0-9a-fA-F]+>")


def clean_message(message: str) -> str:
    """`message` without object reprs (addresses and internal type names)."""
    return _OBJECT_REPR.sub("the data", message)


class ApiError(Exception):
    """A refusal with a reason a person can act on."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        retry_after_s: float | None = None,
    ):
        message = clean_message(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type
        self.param = param
        self.retry_after_s = retry_after_s

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        # Retry-After takes whole seconds; never tell a client to retry at once.
        return {"Retry-After": str(max(1, math.ceil(self.retry_after_s)))}


# Statuses the framework or the protocol layer answers by itself, as OpenAI-style codes.
_STATUS_CODES = {
    400: "invalid_request",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "body_too_large",
    431: "headers_too_large",
}


def for_status(status: int, message: str | None = None) -> ApiError:
    """An ApiError for a bare HTTP status (Starlette's HTTPException, uvicorn's 400)."""
    try:
        message = message or HTTPStatus(status).phrase.lower()
    except ValueError:  # a status Python does not name
        message = message or "error"
    if status >= 500:
        return ApiError(status, message, code="internal", type="server_error")
    return ApiError(status, message, code=_STATUS_CODES.get(status, "invalid_request"))


def invalid_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code="invalid_request", param=param)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, code="invalid_api_key", type="authentication_error")


def not_found(message: str) -> ApiError:
    return ApiError(404, message, code="not_found")


def body_too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body is larger than {limit} bytes", code="body_too_large")


def rate_limited(
    retry_after_s: float, message: str = "rate limit for this API key exceeded"
) -> ApiError:
    return ApiError(
        429,
        message,
        code="rate_limited",
        type="rate_limit_error",
        retry_after_s=retry_after_s,
    )


def queue_full(retry_after_s: float) -> ApiError:
    return ApiError(
        429,
        "the server's queue is full; retry later",
        code="queue_full",
        type="rate_limit_error",
        retry_after_s=retry_after_s,
    )


def unavailable(message: str, code: str, retry_after_s: float = 1.0) -> ApiError:
    return ApiError(503, message, code=code, type="server_error", retry_after_s=retry_after_s)


def internal(message: str = "internal error", code: str = "internal") -> ApiError:
    return ApiError(500, message, code=code, type="server_error")
