"""The lean HTTP/1.1 client under HttpStore and RemoteBackend: response framings, connection reuse, and what
happens when the server closes a kept-alive connection (GET retried on a fresh one, POST never replayed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tether._http11 import BadResponse, ConnectFailed, Http11Pool, Lost

Reply = Callable[[bytes], bytes | None]  # request head+body -> raw response (None: close without answering)
Maker = Callable[[Reply], Awaitable[tuple["_RawServer", str]]]


class _RawServer:
    """A loopback server answering each request with raw bytes from ``reply``; counts connections."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.reply(request)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if b"\r\nConnection: close\r\n" in answer.split(b"\r\n\r\n", 1)[0] + b"\r\n":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def drop_connections(self) -> None:
        for writer in self._writers:
            writer.close()

    async def stop(self) -> None:
        self.drop_connections()
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture
async def raw() -> AsyncIterator[Maker]:
    servers: list[_RawServer] = []

    async def make(reply: Reply) -> tuple[_RawServer, str]:
        server = _RawServer(reply)
        servers.append(server)
        return server, await server.start()

    yield make
    for server in servers:
        await server.stop()


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


async def test_requests_reuse_one_connection_and_send_path_headers_and_body(raw: Maker) -> None:
    server, url = await raw(lambda request: _ok(b'{"ok": true}'))
    pool = Http11Pool(url, {"Authorization": "Bearer t"})
    for _ in range(3):
        assert await pool.request("POST", "/spans", b'{"a": 1}') == (200, b'{"ok": true}')
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/spans HTTP/1.1\r\n")
    assert b"Authorization: Bearer t\r\n" in first and first.endswith(b'\r\n\r\n{"a": 1}')
    pool.close()


async def test_chunked_and_close_delimited_bodies(raw: Maker) -> None:
    chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    server, url = await raw(lambda request: chunked)
    pool = Http11Pool(url, {})
    assert await pool.request("GET", "/x") == (404, b"hello world")
    assert await pool.request("GET", "/x") == (404, b"hello world")
    assert server.connections == 1  # a chunked response leaves the connection reusable
    pool.close()

    server, url = await raw(lambda request: b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
    pool = Http11Pool(url, {})
    assert await pool.request("GET", "/x") == (200, b"until the end")
    assert await pool.request("GET", "/x") == (200, b"until the end")
    assert server.connections == 2  # "Connection: close": a new connection per request
    pool.close()


async def test_a_kept_alive_connection_the_server_closed_is_not_reused(raw: Maker) -> None:
    server, url = await raw(lambda request: _ok(b"1"))
    pool = Http11Pool(url, {})
    await pool.request("POST", "/a", b"{}")
    server.drop_connections()
    await asyncio.sleep(0.05)  # the close reaches the client
    assert await pool.request("POST", "/a", b"{}") == (200, b"1")
    assert server.connections == 2
    pool.close()


async def test_a_post_the_server_drops_unanswered_is_not_replayed_but_a_get_is(raw: Maker) -> None:
    answered = 0

    def reply(request: bytes) -> bytes | None:
        nonlocal answered
        answered += 1
        return _ok(b"ok") if answered != 2 else None  # the second request: close without answering

    server, url = await raw(reply)
    pool = Http11Pool(url, {})
    await pool.request("GET", "/a")
    with pytest.raises(Lost):
        await pool.request("POST", "/enqueue", b"{}")
    assert len(server.requests) == 2  # sent once, never replayed

    answered = 0
    await pool.request("GET", "/a")
    assert await pool.request("GET", "/b") == (200, b"ok")  # dropped once on a reused connection: retried
    assert [r.split(b" ")[1] for r in server.requests[2:]] == [b"/v1/a", b"/v1/b", b"/v1/b"]
    pool.close()


async def test_nothing_listening_and_not_http(raw: Maker) -> None:
    server, url = await raw(lambda request: b"SSH-2.0-OpenSSH\r\n\r\n")
    pool = Http11Pool(url, {})
    with pytest.raises(BadResponse, match=r"not an HTTP/1\.1 response"):
        await pool.request("GET", "/x")
    pool.close()
    await server.stop()
    with pytest.raises(ConnectFailed):
        await Http11Pool(url, {}).request("GET", "/x")


async def test_limit_caps_concurrent_connections(raw: Maker) -> None:
    server, url = await raw(lambda request: _ok(b"x"))
    pool = Http11Pool(url, {}, limit=2)
    results = await asyncio.gather(*(pool.request("GET", f"/{i}") for i in range(20)))
    assert results == [(200, b"x")] * 20
    assert server.connections <= 2
    pool.close()
