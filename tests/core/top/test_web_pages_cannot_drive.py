"""Issue 26 item 6: a web page cannot drive a loopback store, dashboard or proxy without a token.

DNS rebinding (a foreign ``Host`` on a loopback socket) is refused, so is a write with a foreign ``Origin`` or a
body that is not JSON (``text/plain``: what a page can send without a CORS preflight). Real servers on
loopback, raw HTTP requests with the headers a browser would send."""

from __future__ import annotations

import asyncio

import pytest

from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.server import start_server
from tether.store import open_store
from tether.testing.fake_llm import FakeLLM, text

SPEC = b'{"specs": [{"input": "x"}]}'
CHAT = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


async def _send(port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(body)), "Connection": "close", **headers}
    lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
    writer.write(f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode() + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


JSON = {"Content-Type": "application/json"}
REFUSED = [
    ({"Content-Type": "text/plain"}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ({**JSON, "Origin": "https://attacker.example"}, 403),
    ({**JSON, "Host": "attacker.example"}, 403),
    ({**JSON, "Host": "attacker.example:80", "Origin": "http://attacker.example"}, 403),
]


@pytest.mark.parametrize(("headers", "status"), REFUSED)
async def test_the_loopback_store_refuses_what_a_web_page_can_send(headers: dict[str, str], status: int) -> None:
    store = open_store("memory:")
    async with await start_server(store) as server:
        assert await _send(server.port, "POST", "/v1/rollouts", headers, SPEC) == status
        assert await _send(server.port, "POST", "/v1/resources", headers, b"{}") == status
        assert await store.list_rollouts() == [] and await store.get_resources() is None
        # and what tether's own clients send still works, from any local name
        for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "[::1]"):
            ok = {**JSON, "Host": host, "Origin": f"http://{host}"}
            assert await _send(server.port, "POST", "/v1/rollouts", ok, SPEC) == 200


async def test_dns_rebinding_cannot_read_the_store_or_the_dashboard() -> None:
    store = open_store("memory:")
    async with await start_server(store) as server:
        for path in ("/v1/rollouts/x", "/dashboard/api/sources", "/dashboard/"):
            assert await _send(server.port, "GET", path, {"Host": "attacker.example"}) == 403
        assert await _send(server.port, "GET", "/dashboard/api/sources", {}) == 200


@pytest.mark.parametrize(("headers", "status"), REFUSED)
async def test_the_proxy_refuses_what_a_web_page_can_send(headers: dict[str, str], status: int) -> None:
    async with (
        FakeLLM(handler=lambda request: text("hello")) as llm,
        SpanBatcher(open_store("memory:")) as batcher,
        ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy,
    ):
        assert await _send(proxy.port, "POST", "/v1/chat/completions", headers, CHAT) == status
        assert llm.requests == []  # nothing reached the backend
        assert await _send(proxy.port, "POST", "/v1/chat/completions", JSON, CHAT) == 200
