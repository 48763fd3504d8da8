"""What wraps every HTTP request: id, limits, auth, accounting, access log.

A plain ASGI middleware (not Starlette's BaseHTTPMiddleware, which would hide
client disconnects from streaming routes). In order:
1. a request id: the client's `X-Request-Id` when it is sane, else a new one;
   echoed in the response and carried by every log line of the request;
2. body size: `Content-Length` over the route's limit -> 413 before reading;
   a chunked body is counted as it arrives and cut at the limit;
3. `/v1/*` needs a bearer key (401) and spends a token of the caller's
   bucket (429 + Retry-After);
4. on the way out: `ttsfleet_requests_total{route,code}`, an access log line.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time

from . import errors
from .auth import ApiKeys
from .rate_limit import TokenBucketLimiter

log = logging.getLogger("ttsfleet.access")

_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# Multipart framing around an uploaded file.
_MULTIPART_SLACK = 64 * 1024


class _BodyTooLarge(Exception):
    pass


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)


def request_id_from(headers: dict[bytes, bytes]) -> str:
    given = headers.get(b"x-request-id", b"").decode("latin-1")
    return given if _SANE_REQUEST_ID.match(given) else new_request_id()


async def send_error(send, error: errors.ApiError, request_id: str) -> None:
    body = json.dumps(error.body()).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers().items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HttpGuard:
    def __init__(self, app, *, settings, api_keys: ApiKeys, limiter: TokenBucketLimiter, metrics):
        self.app = app
        self.settings = settings
        self.api_keys = api_keys
        self.limiter = limiter
        self.metrics = metrics

    def _body_limit(self, method: str, path: str) -> int:
        if method == "POST" and path.rstrip("/") == "/v1/audio/voices":
            return self.settings.max_voice_upload_bytes + _MULTIPART_SLACK
        return self.settings.max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.monotonic()
        headers = dict(scope["headers"])
        request_id = request_id_from(headers)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["received_at"] = started
        status = {"code": 0, "started": False, "cut": False}
        error_code = None

        async def send_with_id(message):
            if status["cut"]:
                return  # a 413 went out already; the app's answer has no reader
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                status["started"] = True
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", request_id.encode())]}
            await send(message)

        limit = self._body_limit(scope["method"], scope["path"])
        received = 0

        async def counted_receive():
            # A body without Content-Length is cut at the limit: answer 413
            # now and tell the app the client is gone (frameworks turn any
            # exception raised here into their own 400).
            nonlocal received, error_code
            if status["cut"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit and not status["started"]:
                    error = errors.body_too_large(limit)
                    error_code = error.code
                    self.metrics.errors.labels(type=error.code).inc()
                    await send_error(send, error, request_id)
                    status.update(code=error.status, started=True, cut=True)
                    return {"type": "http.disconnect"}
            return message

        try:
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > limit):
                raise _BodyTooLarge()
            if scope["path"].startswith("/v1/"):
                caller = self.api_keys.authenticate(headers.get(b"authorization", b"").decode("latin-1") or None)
                state["caller"] = caller
                wait_s = self.limiter.take(caller)
                if wait_s > 0:
                    raise errors.rate_limited(wait_s)
            await self.app(scope, counted_receive, send_with_id)
        except (_BodyTooLarge, errors.ApiError) as exc:
            error = errors.body_too_large(limit) if isinstance(exc, _BodyTooLarge) else exc
            error_code = error.code
            self.metrics.errors.labels(type=error.code).inc()
            if status["started"]:
                raise
            status["code"] = error.status
            await send_error(send, error, request_id)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            # A stream the client walked away from is 499 (as nginx counts it).
            code = state.get("final_status") or status["code"] or 500
            if state.get("count_request", True):
                self.metrics.requests.labels(route=template, code=str(code)).inc()
            log.info(
                "request",
                extra={
                    "request_id": request_id,
                    "method": scope["method"],
                    "route": template,
                    "status": code,
                    "caller": state.get("caller"),
                    "error": error_code or state.get("error"),
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                },
            )
