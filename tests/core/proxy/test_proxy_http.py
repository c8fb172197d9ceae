"""The proxy's own HTTP/1.1 server (``tether.proxy._http_server``), spoken to over raw sockets: keep-alive,
pipelined requests answered in order, chunked request bodies, ``Expect: 100-continue``, HTTP/1.0, HEAD, and
requests it cannot read answered with an OpenAI-shaped error and a closed connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.proxy._http_server import HttpServer, Request, Response
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text

CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
async def proxy() -> AsyncIterator[ProxyServer]:
    async with (
        FakeLLM(handler=lambda request: text("hello")) as llm,
        SpanBatcher(MemoryStore()) as batcher,
        ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy,
    ):
        yield proxy


def _request(port: int, body: bytes = CHAT, *, method: str = "POST", path: str = "/v1/chat/completions",
             version: str = "HTTP/1.1", headers: dict[str, str] | None = None) -> bytes:  # fmt: skip
    head = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json", **(headers or {})}
    if "Transfer-Encoding" not in head:
        head["Content-Length"] = str(len(body))
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    return f"{method} {path} {version}\r\n{lines}\r\n".encode() + body


async def _response(reader: asyncio.StreamReader, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-cased names) and body."""
    lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    length = 0 if head_only else int(headers["content-length"])
    return status, headers, await reader.readexactly(length)


async def test_one_connection_serves_pipelined_requests_in_order(proxy: ProxyServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(_request(proxy.port) + _request(proxy.port, method="GET", path="/health") + _request(proxy.port))
    answers = [await _response(reader) for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert answers[1][2] == b"ok" and answers[1][1]["content-type"].startswith("text/plain")
    for _, headers, body in (answers[0], answers[2]):
        assert headers["content-type"] == "application/json"
        assert orjson.loads(body)["choices"][0]["message"]["content"] == "hello"
    writer.write(_request(proxy.port))  # still open (keep-alive) after the pipelined ones
    assert (await _response(reader))[0] == 200
    writer.close()


async def test_a_chunked_body_arriving_in_pieces_is_read_whole(proxy: ProxyServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    chunks = b"".join(
        b"%x;ext=1\r\n%s\r\n" % (len(CHAT[k : k + 10]), CHAT[k : k + 10]) for k in range(0, len(CHAT), 10)
    )
    data = (
        _request(proxy.port, b"", headers={"Transfer-Encoding": "chunked"}) + chunks + b"0\r\nX-Trailer: t\r\n\r\n"
    )
    for k in range(0, len(data), 7):  # in small packets: the server waits for the rest
        writer.write(data[k : k + 7])
        await writer.drain()
        await asyncio.sleep(0)
    status, _, body = await _response(reader)
    assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
    writer.close()


async def test_expect_100_continue_is_answered_before_the_body(proxy: ProxyServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    request = _request(proxy.port, headers={"Expect": "100-continue"})
    head, body = request[: -len(CHAT)], CHAT
    writer.write(head)
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    assert (await _response(reader))[0] == 200
    writer.close()


async def test_http_1_0_closes_unless_kept_alive_and_head_has_no_body(proxy: ProxyServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(_request(proxy.port, version="HTTP/1.0"))
    status, headers, _ = await _response(reader)
    assert status == 200 and headers["connection"] == "close" and await reader.read() == b""
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(_request(proxy.port, b"", method="HEAD", path="/health", version="HTTP/1.0",
                          headers={"Connection": "keep-alive"}))  # fmt: skip
    status, headers, _ = await _response(reader, head_only=True)
    assert status == 200 and headers["content-length"] == "2" and "connection" not in headers
    writer.write(_request(proxy.port, b"", method="GET", path="/health", headers={"Connection": "close"}))
    status, headers, body = await _response(reader)  # the HEAD answer had no body: this one follows it
    assert (status, body, headers["connection"]) == (200, b"ok", "close")
    assert await reader.read() == b""
    writer.close()


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST /v1/chat/completions\r\nHost: x\r\n\r\n", 400),  # no HTTP version
        (b"GET /health HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n", 400),  # a header without a colon
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 4\r\nExpect: magic\r\n\r\n", 417),
        (b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
    ],
)
async def test_unreadable_requests_get_an_error_and_a_closed_connection(
    proxy: ProxyServer, data: bytes, status: int
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(data)
    got, headers, body = await _response(reader)
    assert got == status and headers["connection"] == "close"
    assert orjson.loads(body)["error"]["message"].startswith("the request cannot be read")
    assert await reader.read() == b""
    writer.close()


async def test_a_body_over_the_limit_is_413_before_it_is_read() -> None:
    async def echo(request: Request) -> Response:
        return Response(request.body)

    server = HttpServer(echo, lambda status, why: Response(why.encode(), status), "127.0.0.1", 0, max_body=100)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_request(server.port, b"x" * 100) + _request(server.port, b"y" * 101))
        assert (await _response(reader))[::2] == (200, b"x" * 100)
        status, headers, body = await _response(reader)
        assert (status, headers["connection"]) == (413, "close") and b"over 100 bytes" in body
        assert await reader.read() == b""
        writer.close()
    finally:
        await server.stop()
