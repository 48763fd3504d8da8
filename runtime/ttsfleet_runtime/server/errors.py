"""API errors as clients see them: an HTTP status and an OpenAI-shaped body.

OpenAI SDKs read `{"error": {"message", "type", "param", "code"}}`, so every
refusal the server makes, from a bad field to a full queue, has that shape.
"""

from __future__ import annotations

import math


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


def invalid_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code="invalid_request", param=param)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, code="invalid_api_key", type="authentication_error")


def not_found(message: str) -> ApiError:
    return ApiError(404, message, code="not_found")


def body_too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body is larger than {limit} bytes", code="body_too_large")


def rate_limited(retry_after_s: float) -> ApiError:
    return ApiError(
        429,
        "rate limit for this API key exceeded",
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
