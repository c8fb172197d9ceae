"""A small HTTP/1.1 keep-alive client for tether's own hot paths: one request, one response, connections reused.

``HttpStore`` makes several small JSON calls per rollout and the proxy one upstream call per model call; a
general client's per-request machinery (aiohttp's, ~0.1-0.15 ms of CPU) cost more than tether's own work.
This one writes the request in one buffer and reads a ``Content-Length`` (or chunked) response from asyncio
streams. Connections are pooled per event loop; an idle connection the server has closed is never reused,
and one that fails before a single response byte arrived is retried on a fresh connection only for GET (a
POST may have been applied).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

from tether._slots import Slots

_IDLE_S = 30.0  # below the server's keep-alive timeout (aiohttp: 75 s): never race its close
_CONNECT_S = 10.0


class ConnectFailed(OSError):
    """No connection could be opened (nothing listens, name unknown, timeout)."""


class Lost(OSError):
    """The connection failed during the exchange."""


class BadResponse(ValueError):
    """What came back is not an HTTP/1.1 response."""


class _Conn:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing() and now - self.idle_since < _IDLE_S

    def close(self) -> None:
        self.writer.transport.abort()


class Http11Pool:
    """Keep-alive connections to the origin of ``url``, bound to the loop of their first use."""

    def __init__(self, url: str, headers: dict[str, str], limit: int | None = None) -> None:
        parts = urlsplit(url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"Host: {host_header}"] + [f"{k}: {v}" for k, v in headers.items()]
        self._head_tail = ("\r\n".join(lines) + "\r\n").encode()  # UTF-8: a non-ASCII token arrives as typed
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self._tls else None
        self._idle: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limit = limit
        self._slots: Slots | None = None  # at most ``limit`` requests (connections) at once

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """``(status, body)``. Raises ``ConnectFailed``, ``Lost`` or ``BadResponse``."""
        self._bind()
        slots = self._slots
        if slots is None:
            return await self._request(method, path, body)
        if not slots.try_take():
            await slots.take()
        try:
            return await self._request(method, path, body)
        finally:
            slots.give()

    async def _request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\n".encode("latin-1") + self._head_tail
        data = head + (b"Content-Length: %d\r\n\r\n" % len(body) + body if body is not None else b"\r\n")
        conn = self._take()
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        try:
            return await self._exchange(conn, data)
        except _NothingBack as exc:
            if reused and method == "GET":
                conn = await self._connect()
                try:
                    return await self._exchange(conn, data)
                except _NothingBack as again:
                    raise Lost(str(again) or "the server closed the connection") from None
            raise Lost(str(exc) or "the server closed the connection without answering") from None

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- internals --------------------------------------------------------------------------------------------

    def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections of another (maybe closed) loop cannot be used here
            self._idle = []
            self._loop = loop
            self._slots = Slots(self._limit) if self._limit else None

    def _take(self) -> _Conn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.usable(now):
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Conn:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=1 << 20), _CONNECT_S
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__) from None
        return _Conn(reader, writer)

    async def _exchange(self, conn: _Conn, data: bytes) -> tuple[int, bytes]:
        got_bytes = False
        try:
            conn.writer.write(data)
            try:
                head = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise _NothingBack("the server closed the connection") from None
                got_bytes = True
                raise Lost("the connection closed inside the response headers") from None
            except asyncio.LimitOverrunError:
                raise BadResponse("response headers over 1 MiB") from None
            got_bytes = True
            status_line, *headers = head[:-4].split(b"\r\n")
            status, keep = _status(status_line)
            length, chunked = -1, False
            for header in headers:
                name, _, value = header.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value.lower()
                elif name == b"connection":
                    keep = b"close" not in value.lower()
            if chunked:
                body = await _read_chunked(conn.reader)
            elif length >= 0:
                body = await conn.reader.readexactly(length)
            else:
                body, keep = await conn.reader.read(), False
        except _NothingBack:
            conn.close()
            raise
        except (OSError, asyncio.IncompleteReadError) as exc:
            conn.close()
            if not got_bytes:
                raise _NothingBack(str(exc)) from None
            raise Lost(str(exc) or type(exc).__name__) from None
        except BaseException:  # cancelled mid-exchange, or a malformed response: the stream state is unknown
            conn.close()
            raise
        if keep:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        return status, body


class _NothingBack(Exception):
    """The connection ended before any response byte: the request may never have been read."""


def _status(line: bytes) -> tuple[int, bool]:
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise BadResponse(f"not an HTTP/1.1 response: {line[:100]!r}")
    return int(parts[1]), parts[0] == b"HTTP/1.1"


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size_line = await reader.readline()
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadResponse(f"bad chunk size line {size_line[:50]!r}") from None
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)
