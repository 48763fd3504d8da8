"""uvicorn's HTTP/1.1 protocols with the limits a shared pod needs.

What uvicorn leaves open, closed here, below the ASGI app (which never sees
a request until its head is complete):
- the request head (request line + headers) must arrive within
  `header_timeout_s` of the connection opening or of its first byte after a
  keep-alive pause; a client that trickles it (slowloris) gets 408 and the
  connection is closed;
- a head larger than `max_header_bytes` is refused with 431;
- uvicorn's own refusals (malformed requests) carry the OpenAI error shape
  like every other error of this server, instead of a text/plain body.
The body's own deadline is HttpGuard's: it is the app's to read.

Two parsers, one set of guarantees (`_HeadGuard` holds what they share):
- httptools (C, llhttp), chosen where it imports. It has no head-size limit
  of its own; here a head is measured as it arrives (each read while it is
  incomplete) and once complete (request line + headers, however it was cut
  into reads). Measured on a CPU (bench/http_overhead.py at 7d79071, 4 s responses of
  9 PCM chunks over keep-alive connections; docs/benchmarks.md): the
  server's CPU per request 1.55 ms against h11's 1.75 (-11%, lower in every
  repeat). h11 and its event objects are pure Python on the event-loop
  thread, which shares the interpreter lock with the engine.
- h11 (pure Python), the fallback. Its limit is on buffered bytes of an
  incomplete head: a larger head that arrives complete in one read passes.
Pipelining: a head that follows a request whose response is still going out
is not timed (that response's own cycle ends it; the head is timed from its
next byte after it), and with httptools the read in which one request ends
and the next head starts counts whole towards that head's size.
"""

from __future__ import annotations

import json
import logging
import sys

from . import errors

log = logging.getLogger(__name__)


def _raw_error(error: errors.ApiError) -> bytes:
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {error.status} {error.code.replace('_', ' ')}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def _headers_too_large() -> errors.ApiError:
    return errors.ApiError(431, "the request headers are too large", code="headers_too_large")


class _HeadGuard:
    """The head deadline and the refusals, mixed into a uvicorn protocol class (it
    gives `loop`, `transport`, `cycle`); the parser's side says `_awaiting_head()`."""

    header_timeout_s: float
    max_header_bytes: int
    _head_timer = None

    def _awaiting_head(self) -> bool:
        raise NotImplementedError

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

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

    def _head_timed_out(self) -> None:
        self._head_timer = None
        upgraded = self.transport.get_protocol() is not self
        if upgraded or self.transport.is_closing() or not self._awaiting_head():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still going out (pipelining): its own cycle ends it
        self._refuse(
            errors.ApiError(
                408,
                f"the request headers did not arrive within {self.header_timeout_s:g} s",
                code="request_timeout",
            )
        )

    def _refuse(self, error: errors.ApiError) -> None:
        self._disarm_head_timer()
        self.transport.write(_raw_error(error))
        self.transport.close()


def guarded_h11_protocol(header_timeout_s: float, max_header_bytes: int) -> type:
    """uvicorn's h11 protocol with the guards, for `uvicorn.Config(http=...)`."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class _Connection(h11.Connection):
        """An h11 connection that remembers why it last refused the peer's bytes."""

        last_error: h11.RemoteProtocolError | None = None

        def next_event(self):
            try:
                return super().next_event()
            except h11.RemoteProtocolError as exc:
                self.last_error = exc
                raise

    class GuardedH11Protocol(_HeadGuard, H11Protocol):
        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            self.conn = _Connection(h11.SERVER, max_header_bytes)

        def _awaiting_head(self) -> bool:
            return self.conn.their_state is h11.IDLE

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm_head_timer()  # a new head starts (after a keep-alive pause)
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm_head_timer()

        def send_400_response(self, msg: str) -> None:
            cause = self.conn.last_error
            status = getattr(cause, "error_status_hint", 400) or 400
            if status == 431:
                self._refuse(_headers_too_large())
            else:
                self._refuse(errors.for_status(status, f"malformed HTTP request ({cause or msg})"))

    GuardedH11Protocol.header_timeout_s = header_timeout_s
    GuardedH11Protocol.max_header_bytes = max_header_bytes
    return GuardedH11Protocol


class _HeadTooLarge(Exception):
    """Raised in httptools' headers-complete callback; the parser reports it as its
    callback error, whose context this is."""


def guarded_httptools_protocol(header_timeout_s: float, max_header_bytes: int) -> type:
    """uvicorn's httptools protocol with the guards, for `uvicorn.Config(http=...)`.
    Raises ImportError where httptools is not installed."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(_HeadGuard, HttpToolsProtocol):
        _head_pending = True  # from a connection's start, and again after each request
        _head_begun = False  # the pending head's first byte has come
        _heads = 0  # heads completed on this connection
        _head_bytes = 0  # of the pending head, counted per read

        def _awaiting_head(self) -> bool:
            return self._head_pending

        def data_received(self, data: bytes) -> None:
            pending, heads = self._head_pending, self._heads
            if pending:
                self._arm_head_timer()  # a new head starts (after a keep-alive pause)
            super().data_received(data)
            if not self._head_begun or self.transport.is_closing():
                return
            if pending and self._heads == heads:
                self._head_bytes += len(data)  # the head's all along: every byte is the head's
            else:
                # The read ended a request and began the next head (pipelining): counted
                # whole, the end of the request before included.
                self._head_bytes = len(data)
            if self._head_bytes > max_header_bytes:
                self._refuse(_headers_too_large())

        def on_message_begin(self) -> None:
            self._head_begun = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            # The head as sent, give or take optional whitespace: "METHOD URL HTTP/1.1\r\n",
            # "name: value\r\n" each, "\r\n".
            size = len(self.parser.get_method()) + len(self.url) + 14
            size += sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > max_header_bytes:
                raise _HeadTooLarge
            self._head_pending = self._head_begun = False
            self._heads += 1
            self._head_bytes = 0
            self._disarm_head_timer()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._head_pending = True
            super().on_message_complete()

        def send_400_response(self, msg: str) -> None:
            # uvicorn calls this from its `except httptools.HttpParserError` block.
            cause = sys.exc_info()[1]
            if isinstance(cause.__context__ if cause else None, _HeadTooLarge):
                self._refuse(_headers_too_large())
            else:
                self._refuse(errors.for_status(400, f"malformed HTTP request ({cause or msg})"))

    GuardedHttpToolsProtocol.header_timeout_s = header_timeout_s
    GuardedHttpToolsProtocol.max_header_bytes = max_header_bytes
    return GuardedHttpToolsProtocol


def guarded_protocol(header_timeout_s: float, max_header_bytes: int) -> type:
    """The protocol class to give `uvicorn.Config(http=...)`: httptools' where it
    imports (cheaper), h11's otherwise."""
    try:
        protocol = guarded_httptools_protocol(header_timeout_s, max_header_bytes)
    except ImportError as exc:
        log.info("HTTP/1.1 parser: h11 (httptools does not import: %s)", exc)
        return guarded_h11_protocol(header_timeout_s, max_header_bytes)
    log.info("HTTP/1.1 parser: httptools")
    return protocol
