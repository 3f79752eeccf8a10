"""uvicorn's HTTP protocols with a header read timeout: a client that has not sent its request line
and headers within ``header_timeout_s`` of starting them (or of connecting) is disconnected.

uvicorn times out idle keep-alive connections but not a request that trickles in a byte at a time;
such a client would hold a connection (and SIGTERM's drain) for as long as it likes. The body has
its own deadline in the app (``serve.body_timeout_s``, answered 408).

Two parsers, one rule: ``HeaderTimeoutHttpTools`` (llhttp, C, through ``httptools``) when it is
installed, which ``ragcost serve`` uses; ``HeaderTimeoutH11`` (pure Python) otherwise. A 429 costs the
server 0.37 ms of CPU through httptools and uvloop, 0.57 ms through h11 (``python -m bench.serve_refusal``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

ENV = "RAGCOST_SERVE_HEADER_TIMEOUT_S"  # how ``--workers N`` processes learn the timeout
H11_PATH = "ragcost.serve.protocol:HeaderTimeoutH11"
HTTPTOOLS_PATH = "ragcost.serve.protocol:HeaderTimeoutHttpTools"


def has_httptools() -> bool:
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


def protocol_path(http: str = "auto") -> str:
    """The protocol class ``ragcost serve`` runs (``serve.http``): httptools when installed (auto), else h11."""
    if http == "h11" or (http == "auto" and not has_httptools()):
        return H11_PATH
    if not has_httptools():
        from ragcost.errors import DependencyError

        raise DependencyError("serve.http: httptools needs the httptools package: pip install httptools, "
                              "or set serve.http: auto (h11 when httptools is missing)")
    return HTTPTOOLS_PATH


def protocol_class(http: str = "auto") -> type:
    return HeaderTimeoutHttpTools if protocol_path(http) == HTTPTOOLS_PATH else HeaderTimeoutH11


MAX_HEADER_BYTES = 32 * 1024  # a request line and headers larger than this are refused (431), as nginx's default buffers do
MAX_HEADER_LINES = 128  # ... and more header lines than this
_END = b"\r\n\r\n"


def _too_large_response(what: str) -> bytes:
    import json

    body = json.dumps({"error": {"message": f"request headers: {what}; send smaller headers", "type": "invalid_request_error",
                                 "param": "headers", "code": "request_header_fields_too_large"}}).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


LINGER_S = 2.0  # after a response that closes the connection, how long the client's remaining bytes are read and dropped
LINGER_BYTES = 4 * 1024 * 1024  # ... and at most this many of them


class _LingeringTransport:
    """The connection's transport, whose ``close()`` is a lingering close (RFC 9112, section 9.6).

    A server that answers before reading the whole request (a 401 before the body, a 408, a 413, a
    431) and then closes the socket with request bytes unread, or still arriving, makes the kernel
    answer them with a TCP reset, and a reset can destroy the response in the client's receive
    buffer before the client reads it: the client sees "connection reset" instead of the 401. So
    ``close()`` sends FIN after the response (``write_eof``), keeps reading and dropping what the
    client still sends, and closes when the client closes or after ``LINGER_S``, as nginx's
    ``lingering_close`` does. Everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._t, self._loop = transport, loop
        self.lingering = False
        self.dropped = 0
        self._timer: Optional[asyncio.TimerHandle] = None

    def __getattr__(self, name: str):
        return getattr(self._t, name)

    def close(self) -> None:
        t = self._t
        if self.lingering or t.is_closing():
            return
        try:
            half = t.can_write_eof()
        except (AttributeError, NotImplementedError, RuntimeError):
            half = False
        if not half:  # TLS and the like: a plain close
            t.close()
            return
        self.lingering = True
        t.write_eof()  # FIN once the response is flushed
        try:
            t.resume_reading()  # flow control may have paused reading; the dropped bytes must still be read
        except (AttributeError, RuntimeError):
            pass
        self._timer = self._loop.call_later(LINGER_S, self.finish)

    def close_now(self) -> None:
        """Close without lingering (a client refused for abuse: its bytes are not worth reading)."""
        self.finish()

    def drop(self, n: int) -> None:
        """``n`` more bytes read and dropped while lingering; past LINGER_BYTES the connection closes."""
        self.dropped += n
        if self.dropped > LINGER_BYTES:
            self.finish()

    def finish(self) -> None:
        """The linger is over: the client closed, LINGER_S passed or LINGER_BYTES came."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._t.is_closing():
            self._t.close()

    def is_closing(self) -> bool:
        return self.lingering or self._t.is_closing()


class _HeaderTimer:
    """The timer both protocols share; ``_awaiting_headers`` says whether a request's headers are still due.

    It also bounds what a request's headers may hold before the parser sees them: at most MAX_HEADER_BYTES
    and MAX_HEADER_LINES, else a 431 with OpenAI's error object and the connection closed -- before any key
    is checked, so an anonymous client cannot make the server hold megabytes of headers."""

    header_timeout_s: Optional[float] = None  # None: read from RAGCOST_SERVE_HEADER_TIMEOUT_S, else 10 s

    def _timeout(self) -> float:
        if self.header_timeout_s is not None:
            return self.header_timeout_s
        return float(os.environ.get(ENV, "10"))

    def _awaiting_headers(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_LingeringTransport(transport, self.loop))  # type: ignore[misc,attr-defined]
        self._header_timer: Optional[asyncio.TimerHandle] = None
        self._arm()

    def _lingering(self) -> bool:
        """The response is sent and the connection half-closed: what the client still sends is dropped."""
        return getattr(self.transport, "lingering", False)  # type: ignore[attr-defined]

    def eof_received(self) -> Optional[bool]:
        if self._lingering():
            self.transport.finish()  # type: ignore[attr-defined]
            return None
        return super().eof_received()  # type: ignore[misc]

    def _headers_fit(self, data: bytes) -> bool:
        """Count ``data``'s part before the end of the headers; False (and a 431 sent, the connection closed) past
        the limits. Called with each chunk received while a request's headers are due."""
        tail = getattr(self, "_hdr_tail", b"")  # the last bytes of the previous chunk: an end split across two
        end = (tail + data).find(_END)
        part = data if end < 0 else data[: end + len(_END) - len(tail)]  # never the body after the headers
        self._hdr_bytes = getattr(self, "_hdr_bytes", 0) + len(part)
        self._hdr_lines = getattr(self, "_hdr_lines", 0) + part.count(b"\n")
        over = self._hdr_bytes > MAX_HEADER_BYTES or self._hdr_lines > MAX_HEADER_LINES + 1  # + the request line
        self._hdr_tail = (tail + data)[-3:] if end < 0 else b""
        if end >= 0 and not over:
            self._hdr_bytes = self._hdr_lines = 0  # the next request on this connection starts afresh
        if not over:
            return True
        what = (f"more than {MAX_HEADER_BYTES} bytes" if self._hdr_bytes > MAX_HEADER_BYTES
                else f"more than {MAX_HEADER_LINES} header lines")
        self.logger.info("refusing a request whose headers hold %s (431)", what)  # type: ignore[attr-defined]
        self.transport.write(_too_large_response(what))  # type: ignore[attr-defined]
        self.transport.close_now()  # type: ignore[attr-defined]  # no linger: megabytes of headers are not read
        return False

    def _arm(self) -> None:
        if getattr(self, "_header_timer", None) is None:
            self._header_timer = self.loop.call_later(self._timeout(), self._headers_late)  # type: ignore[attr-defined]

    def _disarm(self) -> None:
        timer, self._header_timer = getattr(self, "_header_timer", None), None
        if timer is not None:
            timer.cancel()

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._awaiting_headers() and not self.transport.is_closing():  # type: ignore[attr-defined]
            self.logger.info("closing a connection whose request headers did not arrive within %.1f s",  # type: ignore[attr-defined]
                             self._timeout())
            self.transport.close_now()  # type: ignore[attr-defined]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._disarm()  # idle keep-alive is uvicorn's own timeout

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._disarm()
        if self._lingering():
            self.transport.finish()  # type: ignore[attr-defined]  # its timer cancelled
        super().connection_lost(exc)  # type: ignore[misc]


class HeaderTimeoutH11(_HeaderTimer, H11Protocol):
    def _awaiting_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def data_received(self, data: bytes) -> None:
        if self._lingering():
            self.transport.drop(len(data))  # type: ignore[attr-defined]
            return
        if self.conn.their_state is h11.IDLE:
            self._arm()  # a request is starting (also after a keep-alive pause): its headers must come in time
            if not self._headers_fit(data):
                return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()


def _httptools_base() -> type:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools missing: a stand-in nobody runs (protocol_path never names it)
        return asyncio.Protocol
    return HttpToolsProtocol


class HeaderTimeoutHttpTools(_HeaderTimer, _httptools_base()):  # type: ignore[misc]
    """The same header timeout on uvicorn's httptools protocol: armed at connect and when a request's
    first byte is parsed (llhttp's message begin), disarmed when its headers are complete."""

    _in_headers = True  # from connect until a request's headers are in

    def _awaiting_headers(self) -> bool:
        return self._in_headers

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._lingering():
            self.transport.drop(len(data))  # type: ignore[attr-defined]
            return
        if self._in_headers and not self.transport.is_closing() and not self._headers_fit(data):
            return
        super().data_received(data)

    def on_header(self, name: bytes, value: bytes) -> None:
        # llhttp reports a chunked body's trailer fields through the same callback, after the headers; uvicorn would
        # append them to the request's headers (one list, which the app reads later), so a key sent as a trailer
        # authenticated the request. RFC 9110 (section 6.5.1) forbids merging trailers into the header section: dropped.
        if self._in_headers:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        super().on_headers_complete()
