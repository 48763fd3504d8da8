"""What wraps every HTTP request: id, limits, auth, accounting, access log.

A plain ASGI middleware (not Starlette's BaseHTTPMiddleware, which would hide
client disconnects from streaming routes). In order:
1. a request id: the client's `X-Request-Id` when it is sane, else a new one;
   echoed in the response and carried by every log line of the request;
2. body size: `Content-Length` over the route's limit (uploads, and speech
   requests to a cloning model, have room for a recording) -> 413 before reading;
   a chunked body is counted as it arrives and cut at the limit; a body that
   has not fully arrived within the body timeout -> 408;
3. `/v1/*` needs a bearer key (401) and spends a token of the caller's
   bucket (429 + Retry-After); an address whose keys keep failing gets 429
   for everything until its failed-auth bucket refills (keys are not
   guessable one request at a time, however fast one asks);
4. on the way out: `ttsfleet_requests_total{route,code}`, an access log line.
   A response cut after its headers is counted with the status it would have
   had (499 when the client left, the failure's status otherwise), not 200.
   Each request counts at most one `ttsfleet_errors_total` (`record_error`).
"""

from __future__ import annotations

import asyncio
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


def record_error(state: dict, metrics, code: str) -> None:
    """Count the request's error once, whichever layer notices it first."""
    if state.get("error") is None:
        state["error"] = code
        metrics.errors.labels(type=code).inc()


def client_address(scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


def authenticate(api_keys: ApiKeys, failures: TokenBucketLimiter, address: str, check) -> str:
    """`check()` (an ApiKeys method call), with failures limited per address.

    The key is always checked first: a good key passes (subject to its own
    rate limit) however many bad ones its address has sent, so one client
    guessing behind a shared proxy or Gateway cannot lock out every tenant
    behind it. Each failure spends a token of the address's bucket; a failure
    with the bucket empty gets 429 and when to come back instead of 401.
    """
    if api_keys.disabled:
        return check()
    try:
        return check()
    except errors.ApiError:
        wait_s = failures.take(address)
        if wait_s > 0:
            raise errors.rate_limited(
                wait_s, "too many requests with invalid API keys from this address"
            ) from None
        raise


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
    def __init__(
        self,
        app,
        *,
        settings,
        api_keys: ApiKeys,
        limiter: TokenBucketLimiter,
        auth_failures: TokenBucketLimiter,
        metrics,
        one_shot_cloning: bool = False,
    ):
        self.app = app
        # A model that clones takes a reference recording in speech requests.
        self.one_shot_cloning = one_shot_cloning
        self.settings = settings
        self.api_keys = api_keys
        self.limiter = limiter
        self.auth_failures = auth_failures
        self.metrics = metrics

    def _body_limit(self, method: str, path: str) -> int:
        if method == "POST" and path.rstrip("/") == "/v1/files":
            return self.settings.batch_max_file_bytes + _MULTIPART_SLACK
        if method == "POST" and path.rstrip("/") == "/v1/audio/voices":
            return self.settings.max_voice_upload_bytes + _MULTIPART_SLACK
        speech = path.rstrip("/") in ("/v1/audio/speech", "/v1/audio/speech/with-timestamps")
        if method == "POST" and speech and self.one_shot_cloning:
            # Room for a reference recording in base64 (`voice_clone.audio`).
            return self.settings.max_body_bytes + 4 * -(-self.settings.max_voice_upload_bytes // 3)
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

        async def send_with_id(message):
            if status["cut"]:
                return  # a 413/408 went out already; the app's answer has no reader
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                status["started"] = True
                message = {
                    **message,
                    "headers": [
                        *message.get("headers", []),
                        (b"x-request-id", request_id.encode()),
                    ],
                }
            await send(message)

        limit = self._body_limit(scope["method"], scope["path"])
        body_deadline = started + self.settings.http_body_timeout_s
        body = {"received": 0, "complete": False}

        async def refuse_body(error: errors.ApiError):
            # Answer now and tell the app the client is gone (frameworks turn
            # any exception raised in receive() into their own 400).
            record_error(state, self.metrics, error.code)
            await send_error(send, error, request_id)
            status.update(code=error.status, started=True, cut=True)
            return {"type": "http.disconnect"}

        async def counted_receive():
            if status["cut"]:
                return {"type": "http.disconnect"}
            if body["complete"]:
                return await receive()  # only a disconnect can come now: wait as long as it takes
            try:
                message = await asyncio.wait_for(
                    receive(), max(0.0, body_deadline - time.monotonic())
                )
            except TimeoutError:
                if status["started"]:
                    return {"type": "http.disconnect"}
                return await refuse_body(
                    errors.ApiError(
                        408,
                        f"the request body did not arrive within {self.settings.http_body_timeout_s:g} s",
                        code="request_timeout",
                    )
                )
            if message["type"] == "http.request":
                body["received"] += len(message.get("body", b""))
                body["complete"] = not message.get("more_body", False)
                if body["received"] > limit and not status["started"]:
                    return await refuse_body(errors.body_too_large(limit))
            return message

        try:
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > limit):
                raise _BodyTooLarge()
            if scope["path"].startswith("/v1/"):
                authorization = headers.get(b"authorization", b"").decode("latin-1") or None
                caller = authenticate(
                    self.api_keys,
                    self.auth_failures,
                    client_address(scope),
                    lambda: self.api_keys.authenticate(authorization),
                )
                state["caller"] = caller
                wait_s = self.limiter.take(caller)
                if wait_s > 0:
                    raise errors.rate_limited(wait_s)
            await self.app(scope, counted_receive, send_with_id)
        except (_BodyTooLarge, errors.ApiError) as exc:
            error = errors.body_too_large(limit) if isinstance(exc, _BodyTooLarge) else exc
            record_error(state, self.metrics, error.code)
            if status["started"]:
                state.setdefault("final_status", error.status)
            else:
                status["code"] = error.status
                await send_error(send, error, request_id)
        except Exception as exc:
            if not status["started"]:
                raise  # the app's catch-all answers 500 and counts it
            # Cut after the headers. The route counted and logged why (a failed
            # generation, a client that left); anything else is ours. Returning
            # without ending the body makes uvicorn drop the connection, which
            # is how an HTTP/1.1 client learns the response is incomplete.
            if state.get("error") is None:
                log.error(
                    "response failed after it started",
                    exc_info=exc,
                    extra={"request_id": request_id},
                )
            record_error(state, self.metrics, "internal")
            state.setdefault("final_status", 500)
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
                    "error": state.get("error"),
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                },
            )
