"""uvicorn's HTTP/1.1 protocol (h11) with the limits a shared pod needs.

What uvicorn leaves open, closed here, below the ASGI app (which never sees
a request until its head is complete):
- the request head (request line + headers) must arrive within
  `header_timeout_s` of the connection opening or of its first byte after a
  keep-alive pause; a client that trickles it (slowloris) gets 408 and the
  connection is closed;
- a head larger than `max_header_bytes` is refused with 431 (h11's
  incomplete-event limit; httptools, uvicorn's default parser, has none);
- uvicorn's own refusals (malformed requests) carry the OpenAI error shape
  like every other error of this server, instead of a text/plain body.
The body's own deadline is HttpGuard's: it is the app's to read.
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import (
    DEFAULT_MAX_INCOMPLETE_EVENT_SIZE,
    H11Protocol,
)

from . import errors


class _Connection(h11.Connection):
    """An h11 connection that remembers why it last refused the peer's bytes."""

    last_error: h11.RemoteProtocolError | None = None

    def next_event(self):
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.last_error = exc
            raise


def _raw_error(error: errors.ApiError) -> bytes:
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {error.status} {error.code.replace('_', ' ')}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def guarded_protocol(header_timeout_s: float) -> type[H11Protocol]:
    """The protocol class to give `uvicorn.Config(http=...)`."""

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            self.conn = _Connection(
                h11.SERVER,
                config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE,
            )
            self._head_timer = None

        def _arm_head_timer(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def connection_lost(self, exc) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm_head_timer()  # a new head starts (after a keep-alive pause)
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm_head_timer()

        def _head_timed_out(self) -> None:
            self._head_timer = None
            upgraded = self.transport.get_protocol() is not self
            if upgraded or self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a response is still going out (pipelining): its own cycle ends it
            error = errors.ApiError(
                408,
                f"the request headers did not arrive within {header_timeout_s:g} s",
                code="request_timeout",
            )
            self.transport.write(_raw_error(error))
            self.transport.close()

        def send_400_response(self, msg: str) -> None:
            cause = self.conn.last_error
            status = getattr(cause, "error_status_hint", 400) or 400
            if status == 431:
                error = errors.ApiError(
                    431, "the request headers are too large", code="headers_too_large"
                )
            else:
                error = errors.for_status(status, f"malformed HTTP request ({cause or msg})")
            self.transport.write(_raw_error(error))
            self.transport.close()

    return GuardedH11Protocol
