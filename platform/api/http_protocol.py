"""uvicorn's httptools protocol with bounds on what one client connection may hold.

httptools itself bounds nothing: it buffers a header of any length (a 16 MB header is
16 MB of gateway memory, concatenated piece by piece), takes any number of header lines
and waits forever for the end of a head or a body. This subclass keeps the same fast
parser and adds, per connection:

- the head (request line and headers) is at most `max_header_bytes` and
  `max_header_count` lines: more is answered 431 at the byte that crosses the bound,
  before anything past it is buffered;
- a head must be complete `header_timeout_s` after the connection opened or after its
  own first byte (slowloris; a connection that never sends a byte), and a body
  `body_timeout_s` after its head: then the connection is answered 408 and closed;
- between two requests, uvicorn's keep-alive timeout closes an idle connection.

A connection closed while its request is still arriving (a 413 for a body over the
limit, a 431) is not closed at once: closing a socket with unread data makes the kernel
send a reset, and a client still sending (Python's urllib and requests) then loses the
answer before it reads it. Instead the answer is sent, the write side shut down, and
what the client still sends is read and dropped, up to LINGER_MAX_BYTES or LINGER_S,
as nginx's lingering close does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import msgspec
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from vigil.platform.settings import EdgeSettings
from vigil.platform.wire.errors import error_body

access_log = logging.getLogger("vigil.access")

LINGER_S = 5.0
LINGER_MAX_BYTES = 32 << 20


class _TooManyHeaders(Exception):
    pass


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: `close()` lingers while the
    request is still arriving; everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttpProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        # Bound once: uvicorn calls these per request, __getattr__ would cost each call.
        self.write = transport.write
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def close(self) -> None:
        self._protocol.close_connection()

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpProtocol(HttpToolsProtocol):
    limits: ClassVar[EdgeSettings] = EdgeSettings()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering = False
        self._raw: asyncio.Transport | None = None
        self._message_open = False  # a request has begun and not all of it has arrived
        self._head_open = True  # the next bytes belong to a request head
        self._head_bytes = 0
        self._num_heads = 0
        self._too_many_headers = False
        self._deadline_ts: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._lingered_bytes = 0

    # ---- the connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(_LingeringTransport(transport, self))  # type: ignore[arg-type]
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._message_open = False  # nothing more arrives: nothing to linger for
        super().connection_lost(exc)

    def close_connection(self) -> None:
        assert self._raw is not None
        if self.lingering or self._raw.is_closing():
            return
        if not self._message_open:
            self._raw.close()
            return
        self.lingering = True  # the request deadlines stop; this one takes over
        if self._raw.can_write_eof():
            self._raw.write_eof()  # sent once what is buffered has gone
        self._raw.resume_reading()
        self.loop.call_later(LINGER_S, self._raw.close)

    def shutdown(self) -> None:
        if self.cycle is None or self.cycle.response_complete:
            assert self._raw is not None
            self._raw.close()  # a stopping server does not wait for a half-sent head
        else:
            super().shutdown()

    # ---- bytes in

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            self._lingered_bytes += len(data)
            if self._lingered_bytes > LINGER_MAX_BYTES:
                assert self._raw is not None
                self._raw.close()
            return
        if not self._head_open:
            super().data_received(data)
            return
        if self._head_bytes == 0:  # the first byte of a request
            self._message_open = True
            if self._deadline_ts is None:
                self._arm(self.limits.header_timeout_s)
        room = self.limits.max_header_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # Feed only up to the bound: the head must end within it.
        heads = self._num_heads
        self._head_bytes = self.limits.max_header_bytes
        super().data_received(data[:room])
        if self._num_heads == heads:
            if not self.transport.is_closing():
                self._refuse(431, self._head_message())
            return
        self.data_received(data[room:])

    def send_400_response(self, msg: str) -> None:
        if self._too_many_headers:
            self._refuse(431, self._head_message())
        else:
            self._refuse(400, "The request is not valid HTTP/1.1; it could not be parsed.")

    # ---- parser callbacks

    def on_headers_complete(self) -> None:
        self._head_open = False
        self._num_heads += 1
        # Counted here, not per header line: the byte bound already holds their memory.
        if len(self.headers) > self.limits.max_header_count:
            self._too_many_headers = True
            raise _TooManyHeaders  # stops the parser; it answers with send_400_response
        self._arm(self.limits.body_timeout_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._message_open = False
        self._head_open = True
        self._head_bytes = 0
        self._disarm()
        super().on_message_complete()

    # ---- deadlines
    # One timer per connection, moved lazily: arming and disarming per request only set
    # `_deadline_ts`; the timer, when it fires early, sleeps again until the deadline.

    def _arm(self, delay_s: float) -> None:
        self._deadline_ts = self.loop.time() + delay_s
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline_ts, self._check_deadline)

    def _disarm(self) -> None:
        self._deadline_ts = None

    def _check_deadline(self) -> None:
        self._timer = None
        if self._deadline_ts is None or self.lingering:
            return
        if self.loop.time() < self._deadline_ts:
            self._timer = self.loop.call_at(self._deadline_ts, self._check_deadline)
            return
        self._deadline_ts = None
        assert self._raw is not None
        if self._head_open and not self._message_open:
            self._raw.close()  # not a byte of a request: an idle connection
            return
        if self._head_open:
            message = f"The request head did not arrive within {self.limits.header_timeout_s:g} s."
        else:
            message = f"The request body did not arrive within {self.limits.body_timeout_s:g} s."
        self._refuse(408, message, linger=False)

    # ---- answers written here, not by the application

    def _head_message(self) -> str:
        return (
            f"The request head is over this server's bounds ({self.limits.max_header_bytes} "
            f"bytes, {self.limits.max_header_count} header lines); send fewer or smaller headers."
        )

    def _refuse(self, status: int, message: str, *, linger: bool = True) -> None:
        """Answer `status` and close; a request the application is serving gets
        `http.disconnect` (its own answer, if any, goes nowhere)."""
        assert self._raw is not None
        client = self.client[0] if self.client else "-"
        fields = {"status": status, "client": client, "refused": message}
        access_log.info(
            f"status={status} client={client} refused: {message}", extra={"fields": fields}
        )
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            error_type = "timeout_error" if status == 408 else "invalid_request_error"
            body = msgspec.json.encode(error_body(message, error_type, None, None))
            head = (
                b"content-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            )
            self._raw.write(STATUS_LINE[status] + head + body)
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        if linger:
            self.close_connection()
        else:
            self._raw.close()


def guarded_protocol(limits: EdgeSettings) -> type[GuardedHttpProtocol]:
    """The protocol class uvicorn builds per connection, bound to these limits."""
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"limits": limits})
