"""The proxy's HTTP/1.1 server: an ``asyncio.Protocol`` that hands each whole request to one handler.

A general web server's per-request machinery (aiohttp's parser, request and response objects, writer) cost
more CPU per call than the proxy's own work; the proxy needs one handler, whole bodies and whole answers. This
server reads a request's head and its whole body (``Content-Length`` or chunked; ``Expect: 100-continue`` is
answered), calls the handler with a ``Request`` and writes its ``Response`` in one write. Connections are kept
alive (HTTP/1.1, or HTTP/1.0 with ``Connection: keep-alive``) and serve pipelined requests one at a time, in
order. A client that goes away while its request is handled cancels the handler's task (and so whatever it
awaits: the upstream request). A request the server cannot read is answered ``on_error``'s error (400, 413,
417, 431) and its connection closed. ``stop`` lets requests in flight finish (up to ``shutdown_timeout_s``), then
cancels the rest; idle connections are closed after ``KEEPALIVE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import cast
from urllib.parse import unquote

log = logging.getLogger(__name__)

#: the largest request head (request line and headers) read; a bigger one is answered 431
MAX_HEAD = 64 * 1024
#: how long an idle keep-alive connection is kept (aiohttp's default)
KEEPALIVE_S = 75.0
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REASONS = {int(s): s.phrase.encode() for s in http.HTTPStatus}


class Request:
    """One request, read whole. ``headers``: lower-cased names, the first value of each; ``path``: decoded,
    without the query; ``content_type``: the media type, lower-cased, without parameters
    (``application/octet-stream`` when the header is missing)."""

    __slots__ = ("body", "content_type", "headers", "local_address", "method", "path")

    def __init__(
        self, method: str, path: str, headers: dict[str, str], body: bytes, local_address: str | None
    ) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.local_address = local_address
        content_type = headers.get("content-type")
        self.content_type = (
            "application/octet-stream" if content_type is None else content_type.split(";", 1)[0].strip().lower()
        )


class Response:
    """A whole answer: status, body, content type and any more headers."""

    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        body: bytes,
        status: int = 200,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.body = body
        self.status = status
        self.content_type = content_type
        self.headers = headers


Handler = Callable[[Request], Awaitable[Response]]
#: builds the answer to a request the server could not read: (status, why) -> Response
OnError = Callable[[int, str], Response]


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(eq=False)
class HttpServer:
    """Serve ``handler`` on ``host:port`` (0: a free port); ``port`` is the bound one once started."""

    handler: Handler
    on_error: OnError
    host: str
    port: int
    _: KW_ONLY
    max_body: int
    shutdown_timeout_s: float = 60.0
    _server: asyncio.Server | None = field(default=None, init=False)
    _connections: set[_Connection] = field(default_factory=set, init=False)
    _sweeper: asyncio.Task[None] | None = field(default=None, init=False)
    _date: bytes = field(default=b"", init=False)
    _date_second: int = field(default=-1, init=False)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._sweeper = loop.create_task(self._sweep())

    async def stop(self) -> None:
        """Stop listening, let the requests in flight finish (then cancel what is left), close every
        connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self._connections):
            conn.closing = True
            if conn.task is None:
                conn.close()
        busy = [conn.task for conn in self._connections if conn.task is not None]
        if busy:
            _, pending = await asyncio.wait(busy, timeout=self.shutdown_timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for conn in list(self._connections):
            conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1.0)

    def date(self) -> bytes:
        """The ``Date`` header's value, formatted once a second."""
        now = time.time()
        second = int(now)
        if second != self._date_second:
            self._date_second = second
            self._date = email.utils.formatdate(now, usegmt=True).encode()
        return self._date

    async def _sweep(self) -> None:
        """Close keep-alive connections idle for over ``KEEPALIVE_S``."""
        while True:
            await asyncio.sleep(KEEPALIVE_S / 4)
            deadline = time.monotonic() - KEEPALIVE_S
            for conn in list(self._connections):
                if conn.task is None and conn.idle_since < deadline:
                    conn.close()


class _Connection(asyncio.Protocol):
    """One client connection: buffers what arrives, hands each whole request to the server's handler."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        # made by the server's loop, for it; asked once (on Python 3.11 each ``get_running_loop`` is a ``getpid``)
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.local_address: str | None = None
        self.buffer = bytearray()
        self.task: asyncio.Task[None] | None = None  # the request being handled
        self.closing = False
        self.idle_since = time.monotonic()
        self._continued = False  # ``100 Continue`` sent for the request being read

    # -- asyncio.Protocol -------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a TCP server's transport; not ``isinstance``-checked: uvloop's is not a subclass of asyncio's
        self.transport = cast(asyncio.Transport, transport)
        sockname = transport.get_extra_info("sockname")
        if isinstance(sockname, tuple) and sockname:
            self.local_address = str(sockname[0])
        self.server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._connections.discard(self)
        self.closing = True
        if self.task is not None:  # the client went away: its call (and the upstream request) is cancelled
            self.task.cancel()
        self.buffer.clear()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.task is None and not self.closing:
            self._next()
        elif len(self.buffer) > MAX_HEAD + self.server.max_body and self.transport is not None:
            self.transport.pause_reading()  # pipelined past any request's size: read on after this answer

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    # -- requests ---------------------------------------------------------------------------------------------

    def _next(self) -> None:
        """Start handling the next request if the buffer holds one whole."""
        try:
            parsed = self._parse()
        except _BadRequest as exc:
            self._write(self.server.on_error(exc.status, str(exc)), head_only=False, keep=False)
            self.close()
            return
        if parsed is None:
            return
        request, keep = parsed
        self.task = self.loop.create_task(self._respond(request, keep))

    def _parse(self) -> tuple[Request, bool] | None:
        buffer = self.buffer
        while buffer[:2] == b"\r\n":  # CRLFs between requests are tolerated (RFC 9112 2.2)
            del buffer[:2]
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD:
                raise _BadRequest(431, f"the request head is over {MAX_HEAD} bytes")
            return None
        if end > MAX_HEAD:
            raise _BadRequest(431, f"the request head is over {MAX_HEAD} bytes")
        lines = bytes(buffer[:end]).decode("utf-8", "surrogateescape").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[0].isalpha():
            raise _BadRequest(400, f"not an HTTP/1.1 request line: {lines[0][:100]!r}")
        method, target, version = parts
        headers: dict[str, str] = {}
        lengths: set[str] = set()
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name[-1] in " \t" or line[0] in " \t":
                raise _BadRequest(400, f"a malformed header line: {line[:100]!r}")
            name = name.lower()
            value = value.strip(" \t")
            if name == "content-length":
                lengths.add(value)
            if name not in headers:
                headers[name] = value
        keep = _keep_alive(version, headers.get("connection"))
        start = end + 4
        chunked = "transfer-encoding" in headers
        if chunked:
            if lengths or headers["transfer-encoding"].lower().rsplit(",", 1)[-1].strip() != "chunked":
                raise _BadRequest(400, "a Transfer-Encoding other than chunked, or with a Content-Length")
            length = -1
        elif lengths:
            value = lengths.pop() if len(lengths) == 1 else ""
            if not (value.isascii() and value.isdigit()):
                raise _BadRequest(400, "a bad Content-Length, or several that disagree")
            length = int(value)
            if length > self.server.max_body:
                raise _BadRequest(413, f"the request body is over {self.server.max_body} bytes")
        else:
            length = 0
        if length and not self._continued and "expect" in headers:
            if headers["expect"].lower() != "100-continue":
                raise _BadRequest(417, f"unknown expectation {headers['expect'][:100]!r}")
            if version == "HTTP/1.1" and len(buffer) < start + max(length, 1) and self.transport is not None:
                self.transport.write(_CONTINUE)
                self._continued = True
        if chunked:
            found = _dechunk(buffer, start, self.server.max_body)
            if found is None:
                return None
            body, stop = found
        else:
            stop = start + length
            if len(buffer) < stop:
                return None
            body = bytes(buffer[start:stop])
        del buffer[:stop]
        self._continued = False
        return Request(method, _path(target), headers, body, self.local_address), keep

    async def _respond(self, request: Request, keep: bool) -> None:
        try:
            response = await self.server.handler(request)
        except Exception:
            log.exception("the proxy's handler raised")
            response = self.server.on_error(500, "the proxy failed to answer (see its log)")
        # (cancelled: the client has gone, there is no one to answer)
        keep = keep and not self.closing
        self._write(response, head_only=request.method == "HEAD", keep=keep)
        self.task = None
        self.idle_since = time.monotonic()
        if not keep:
            self.close()
        elif self.buffer:
            if self.transport is not None:
                self.transport.resume_reading()
            self._next()

    def _write(self, response: Response, *, head_only: bool, keep: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        body = response.body
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nDate: %s\r\n%s" % (
            response.status,
            _REASONS.get(response.status, b"Unknown"),
            response.content_type.encode(),
            len(body),
            self.server.date(),
            b"" if keep else b"Connection: close\r\n",
        )
        if response.headers:
            head += "".join(f"{k}: {v}\r\n" for k, v in response.headers.items()).encode()
        transport.write(head + b"\r\n" if head_only else b"".join((head, b"\r\n", body)))


def _keep_alive(version: str, connection: str | None) -> bool:
    if connection is None:
        return version == "HTTP/1.1"
    tokens = connection.lower()
    if "close" in tokens:
        return False
    return version == "HTTP/1.1" or "keep-alive" in tokens


def _path(target: str) -> str:
    """The decoded path of a request target (origin form, or absolute form)."""
    if not target.startswith("/"):
        _, sep, rest = target.partition("://")
        target = "/" + rest.partition("/")[2] if sep else target
    path = target.partition("?")[0].partition("#")[0]
    return unquote(path) if "%" in path else path


def _dechunk(buffer: bytearray, start: int, limit: int) -> tuple[bytes, int] | None:
    """A chunked body that starts at ``start`` in ``buffer`` and where it ends, or None if not all there.
    ``_BadRequest`` if it is malformed or over ``limit`` bytes."""
    out = bytearray()
    at = start
    while True:
        eol = buffer.find(b"\r\n", at)
        if eol < 0:
            if len(buffer) - at > 1024:
                raise _BadRequest(400, "a chunk size line over 1 KiB")
            return None
        size_field = bytes(buffer[at:eol]).split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            raise _BadRequest(400, f"a bad chunk size {size_field[:50]!r}") from None
        if size < 0 or len(out) + size > limit:
            raise _BadRequest(413, f"the request body is over {limit} bytes")
        at = eol + 2
        if size == 0:  # the last chunk, then trailers up to an empty line
            while True:
                eol = buffer.find(b"\r\n", at)
                if eol < 0:
                    return None
                if eol == at:
                    return bytes(out), eol + 2
                at = eol + 2
        if len(buffer) < at + size + 2:
            return None
        if buffer[at + size : at + size + 2] != b"\r\n":
            raise _BadRequest(400, "a chunk not followed by CRLF")
        out += buffer[at : at + size]
        at += size + 2
