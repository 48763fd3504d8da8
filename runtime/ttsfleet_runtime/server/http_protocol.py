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

And on the way out, for HTTP and WebSocket alike, a send timeout
(`_SendDeadline`): a client that takes nothing of a response for
`send_timeout_s` while more waits for it loses the connection.

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
import socket
import struct
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


# The kernel's send buffer of each connection (Linux doubles it for its own
# bookkeeping). Left to autotuning it grows with the congestion window: on
# loopback (a sidecar proxy, a test) to megabytes at once, 20-30 s of PCM that a
# client which stopped reading would soak up before any backpressure begins. At
# this size one connection still carries ~1 MB/s over a 100 ms path, twenty
# times what a stream of PCM needs.
SEND_BUFFER_BYTES = 64 * 1024

# Where a connection dropped by the send timeout says so to the app: a key of
# its scope's per-request "state" (`sending_timed_out`).
_SEND_TIMED_OUT = "send_timed_out"


def sending_timed_out(scope) -> bool:
    """Whether the send timeout dropped this request's (or session's) connection:
    the app then counts the request as `send_timeout`, not as a client that left."""
    return bool(scope.get("state", {}).get(_SEND_TIMED_OUT))


class _SendDeadline:
    """The send timeout, mixed into a uvicorn protocol class, HTTP or WebSocket (it
    gives `loop` and `transport`; the class says where the current scope is).

    asyncio pauses a protocol's writing while the connection's write buffer is over
    its high-water mark (64 KiB), which happens only once the kernel's socket buffers
    are full too: the client has stopped taking bytes. uvicorn's `send` then waits
    for as long as the client likes, and so does the app (a speech stream, its batch
    slot, the audio waiting in it); closing such a connection waits for the buffer to
    drain, so forever. The kernel's share is capped first (`SEND_BUFFER_BYTES`, so
    the pause comes soon); then writing that stays paused for `send_timeout_s` aborts the
    connection, dropping what it buffered: the app sees its client gone (its send
    returns or raises, `http.disconnect`), cancels the generation, and finds why in
    the scope (`sending_timed_out`). A reader however slow keeps its connection as
    long as it takes ~48 KiB (down to the low-water mark) within each timeout."""

    send_timeout_s: float | None = None
    _send_timer = None

    def _current_scope(self) -> dict | None:
        raise NotImplementedError

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and self.send_timeout_s is not None:
            # What the kernel holds for a client that stopped reading: bounded here.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_timeout_s is not None and self._send_timer is None:
            self._send_timer = self.loop.call_later(self.send_timeout_s, self._send_timed_out)

    def resume_writing(self) -> None:
        self._disarm_send_timer()
        super().resume_writing()

    def connection_lost(self, exc) -> None:
        self._disarm_send_timer()
        super().connection_lost(exc)

    def _disarm_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        scope = self._current_scope()
        if scope is not None:
            scope.setdefault("state", {})[_SEND_TIMED_OUT] = True
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # Reset, not close: a closed socket's kernel buffer would still wait
            # for the client to read it.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()


def guarded_h11_protocol(
    header_timeout_s: float, max_header_bytes: int, send_timeout_s: float | None = None
) -> type:
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

    class GuardedH11Protocol(_HeadGuard, _SendDeadline, H11Protocol):
        def __init__(self, config, *args, **kwargs):
            super().__init__(config, *args, **kwargs)
            self.conn = _Connection(h11.SERVER, max_header_bytes)

        def _current_scope(self) -> dict | None:
            return self.cycle.scope if self.cycle is not None else None

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
    GuardedH11Protocol.send_timeout_s = send_timeout_s
    return GuardedH11Protocol


class _HeadTooLarge(Exception):
    """Raised in httptools' headers-complete callback; the parser reports it as its
    callback error, whose context this is."""


def guarded_httptools_protocol(
    header_timeout_s: float, max_header_bytes: int, send_timeout_s: float | None = None
) -> type:
    """uvicorn's httptools protocol with the guards, for `uvicorn.Config(http=...)`.
    Raises ImportError where httptools is not installed."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(_HeadGuard, _SendDeadline, HttpToolsProtocol):
        _head_pending = True  # from a connection's start, and again after each request
        _head_begun = False  # the pending head's first byte has come
        _heads = 0  # heads completed on this connection
        _head_bytes = 0  # of the pending head, counted per read

        def _current_scope(self) -> dict | None:
            return self.cycle.scope if self.cycle is not None else None

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
    GuardedHttpToolsProtocol.send_timeout_s = send_timeout_s
    return GuardedHttpToolsProtocol


def guarded_protocol(
    header_timeout_s: float, max_header_bytes: int, send_timeout_s: float | None = None
) -> type:
    """The protocol class to give `uvicorn.Config(http=...)`: httptools' where it
    imports (cheaper), h11's otherwise."""
    try:
        protocol = guarded_httptools_protocol(header_timeout_s, max_header_bytes, send_timeout_s)
    except ImportError as exc:
        log.info("HTTP/1.1 parser: h11 (httptools does not import: %s)", exc)
        return guarded_h11_protocol(header_timeout_s, max_header_bytes, send_timeout_s)
    log.info("HTTP/1.1 parser: httptools")
    return protocol


def guarded_websocket_protocol(send_timeout_s: float | None) -> type:
    """uvicorn's WebSocket protocol (websockets' sans-I/O one, what uvicorn picks
    where websockets is installed) with the send timeout, for
    `uvicorn.Config(ws=...)`."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class GuardedWebSocketProtocol(_SendDeadline, WebSocketsSansIOProtocol):
        def _current_scope(self) -> dict | None:
            return getattr(self, "scope", None)

    GuardedWebSocketProtocol.send_timeout_s = send_timeout_s
    return GuardedWebSocketProtocol
