"""The webhook sender: one POST per attempt over kept-alive HTTP/1.1 connections, nothing more.

A webhook attempt needs a POST of a few KB, the answer's status and its ``Retry-After``, a timeout, no
redirects followed, TLS for ``https``, and the connect-time address check (no loopback, private,
link-local or reserved address unless allowed, against DNS rebinding). httpx (over httpcore and anyio)
spends ~0.5 ms of CPU per such POST on this machine, more than the API spends accepting a batch; this
sender spends ~0.05 ms: it writes the request with one ``write``, parses the answer with ``httptools``
(the C parser uvicorn uses), and keeps idle connections per origin for the next attempt.

Every byte a receiver sends is bounded: the status line and headers together at most ``MAX_HEAD`` bytes
and ``MAX_HEADERS`` fields (what common HTTP clients allow), the body read (so the connection can be
reused) up to ``MAX_BODY`` bytes, then the connection is dropped, and the whole attempt by ``timeout``.
An answer over the head's bounds is a ``SendError``: a failed attempt, retried on the schedule.

A kept-alive connection the receiver closed meanwhile is retried once on a new connection, only when
nothing of an answer came back (as every HTTP client does).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httptools

from worker.webhooks.guard import address_refused, lookup

_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # would end or split the request line: never sent
MAX_BODY = 64 * 1024  # bytes of an answer's body read at most (a receiver's answer is ignored)
MAX_HEAD = 16 * 1024  # bytes of an answer's status line and headers together
MAX_HEADERS = 100  # header fields of an answer
MAX_IDLE = 64  # idle connections kept per origin: a burst's worth (``lanes.FIRST_IN_FLIGHT``)
MAX_IDLE_TOTAL = 256  # ... and over all origins
USER_AGENT = "wikiq-webhooks/0.1"


class SendError(Exception):
    """The POST got no HTTP answer: ``str()`` says why, as ``<kind>: <detail>``."""


class _Closed(Exception):
    """The connection ended before any byte of an answer (a kept-alive one the receiver closed)."""


@dataclass
class Answer:
    """What a receiver answered: the status and the ``Retry-After`` header (None when absent)."""

    status: int
    retry_after: str | None


@dataclass
class _Reading:
    """httptools' callbacks for one answer."""

    retry_after: str | None = None
    headers: int = 0
    headers_done: bool = False
    complete: bool = False
    body: int = 0
    keep_alive: bool = False
    parser: Any = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers += 1
        if name.lower() == b"retry-after":
            self.retry_after = value.decode("latin-1").strip()

    def on_headers_complete(self) -> None:
        self.headers_done = True
        self.keep_alive = bool(self.parser.should_keep_alive())  # llhttp forgets it once the message ends

    def on_body(self, body: bytes) -> None:
        self.body += len(body)

    def on_message_complete(self) -> None:
        self.complete = True


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class WebhookSender:
    """Sends webhook POSTs (see the module); ``allow_private`` skips the address check, ``timeout`` bounds
    one attempt (connecting, sending and reading the answer)."""

    allow_private: bool
    timeout: float
    idle: dict[tuple[str, str, int], list[_Connection]] = field(default_factory=dict)
    _tls: ssl.SSLContext | None = None

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        """POST ``body`` to ``url`` with ``headers``: the answer, ``TimeoutError`` after ``timeout``
        seconds, ``SendError`` when no HTTP answer came."""
        parts = urlsplit(url)
        scheme = parts.scheme
        if scheme not in ("http", "https") or not parts.hostname or _UNSAFE.search(url):
            raise SendError(f"UnsupportedProtocol: {url[:100]!r} is not an http(s) URL")
        host = parts.hostname
        port = parts.port or (443 if scheme == "https" else 80)
        default = port == (443 if scheme == "https" else 80)
        shown = f"[{host}]" if ":" in host else host
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"POST {target} HTTP/1.1",
            f"host: {shown if default else f'{shown}:{port}'}",
            f"user-agent: {USER_AGENT}",
            f"content-length: {len(body)}",
            *(f"{name}: {value}" for name, value in headers.items()),
        ]
        try:  # submission keeps a URL ASCII (``guard.sendable_url``): anything else is refused, not sent
            request = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body
        except UnicodeEncodeError:
            raise SendError(f"UnsupportedProtocol: {url[:100]!r} is not ASCII once encoded") from None
        origin = (scheme, host, port)
        async with asyncio.timeout(self.timeout):
            while True:
                reused, connection = await self._connection(origin)
                try:
                    answer, keep = await self._exchange(connection, request)
                except _Closed:
                    connection.close()
                    if reused:
                        continue  # the receiver closed an idle connection: once more on a new one
                    raise SendError("RemoteProtocolError: the receiver closed the connection") from None
                except BaseException:
                    connection.close()
                    raise
                if keep and self._may_keep(origin):
                    self.idle.setdefault(origin, []).append(connection)
                else:
                    connection.close()
                return answer

    def _may_keep(self, origin: tuple[str, str, int]) -> bool:
        """Whether one more idle connection to ``origin`` stays within ``MAX_IDLE`` and ``MAX_IDLE_TOTAL``."""
        if len(self.idle.get(origin, ())) >= MAX_IDLE:
            return False
        return sum(map(len, self.idle.values())) < MAX_IDLE_TOTAL

    async def _connection(self, origin: tuple[str, str, int]) -> tuple[bool, _Connection]:
        """An idle connection to ``origin`` (True) or a new one (False)."""
        kept = self.idle.get(origin)
        while kept:
            connection = kept.pop()
            if not connection.reader.at_eof() and not connection.writer.is_closing():
                return True, connection
            connection.close()
        scheme, host, port = origin
        try:
            addresses = await lookup(host, port)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode
            raise SendError(f"ConnectError: cannot resolve {host[:100]}: {exc}") from None
        if not addresses or (not self.allow_private and any(address_refused(a) for a in addresses)):
            raise SendError(f"ConnectError: {host} resolves to a refused address")
        tls = None
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        try:
            reader, writer = await asyncio.open_connection(
                addresses[0], port, ssl=tls, server_hostname=host if tls else None, limit=MAX_BODY
            )
        except (OSError, ssl.SSLError) as exc:
            raise SendError(f"ConnectError: {exc}") from None
        return False, _Connection(reader, writer)

    @staticmethod
    async def _exchange(connection: _Connection, request: bytes) -> tuple[Answer, bool]:
        """Send ``request`` and read the answer: it, and whether the connection may be used again."""
        reading = _Reading()
        parser = reading.parser = httptools.HttpResponseParser(reading)
        got = 0  # bytes of the answer so far
        try:
            connection.writer.write(request)
            await connection.writer.drain()
            while not reading.complete:
                # never more of the head than its bound reaches the parser
                data = await connection.reader.read(65536 if reading.headers_done else MAX_HEAD + 1 - got)
                if not data:
                    if not got:
                        raise _Closed()
                    if not reading.headers_done:
                        raise SendError("RemoteProtocolError: the answer ended inside its headers")
                    return Answer(parser.get_status_code(), reading.retry_after), False  # body to the end
                got += len(data)
                parser.feed_data(data)
                if reading.headers > MAX_HEADERS:
                    raise SendError(f"RemoteProtocolError: the answer has over {MAX_HEADERS} header fields")
                if not reading.headers_done and got > MAX_HEAD:
                    raise SendError(f"RemoteProtocolError: the answer's headers are over {MAX_HEAD} bytes")
                if reading.headers_done and reading.body > MAX_BODY:
                    return Answer(parser.get_status_code(), reading.retry_after), False
        except ConnectionError as exc:
            if not got:
                raise _Closed() from None
            raise SendError(f"ReadError: {exc}") from None
        except httptools.HttpParserError as exc:
            raise SendError(f"RemoteProtocolError: {exc}") from None
        except (OSError, ssl.SSLError) as exc:
            raise SendError(f"NetworkError: {exc}") from None
        return Answer(parser.get_status_code(), reading.retry_after), reading.keep_alive

    async def aclose(self) -> None:
        """Close every idle connection."""
        for kept in self.idle.values():
            for connection in kept:
                connection.close()
        self.idle.clear()
