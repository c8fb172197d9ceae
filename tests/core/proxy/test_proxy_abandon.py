"""Issue 26 item 7: calls whose clients give up are cancelled upstream, concurrent upstream calls are bounded
with a clear 503, and the backend timeout defaults to far less than 600 s.

The backend is a real HTTP server on loopback that reads each request and never answers, counting the
connections still open to it; the proxy forwards to it with ``RemoteBackend``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tether.capture.span_batcher import SpanBatcher
from tether.models.base import DEFAULT_BACKEND_TIMEOUT_S
from tether.models.http_backend import HttpBackend
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class HangingBackend:
    """Accepts chat requests and never answers; ``open`` is how many connections are still held."""

    def __init__(self) -> None:
        self.open = 0
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self._writers.add(writer)
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            while await reader.read(65536):  # until the caller closes its end
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            self._writers.discard(writer)
            writer.close()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):  # what a test left held: end it before the loop goes
            writer.close()
        await asyncio.sleep(0.05)


@pytest.fixture
async def hanging() -> AsyncIterator[tuple[HangingBackend, str]]:
    backend = HangingBackend()
    async with backend as url:
        yield backend, url


async def _call(url: str, timeout_s: float) -> int | None:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
            async with http.post(f"{url}/v1/chat/completions", json=BODY) as r:
                await r.read()
                return r.status
    except TimeoutError:
        return None


async def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


async def test_abandoned_calls_are_cancelled_upstream(hanging: tuple[HangingBackend, str]) -> None:
    backend, url = hanging
    async with (
        SpanBatcher(MemoryStore()) as batcher,
        ProxyServer(RemoteBackend(url), batcher=batcher, close_backend=True) as proxy,
    ):
        results = await asyncio.gather(*(_call(proxy.url, 1.0) for _ in range(40)))
        assert results == [None] * 40  # every client gave up
        # (on a loaded machine a few calls are cancelled before they reach the backend at all)
        assert backend.requests > 0
        await _until(lambda: backend.open == 0, 30.0)  # every upstream request was dropped with its client


async def test_concurrent_upstream_calls_are_bounded_with_a_503(hanging: tuple[HangingBackend, str]) -> None:
    backend, url = hanging
    async with (
        SpanBatcher(MemoryStore()) as batcher,
        ProxyServer(
            RemoteBackend(url), batcher=batcher, close_backend=True, max_concurrent_calls=2, queue_timeout_s=0.2
        ) as proxy,
    ):
        held = [asyncio.ensure_future(_call(proxy.url, 30)) for _ in range(2)]
        await _until(lambda: backend.requests == 2)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{proxy.url}/v1/chat/completions", json=BODY) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "1"
                error = (await r.json())["error"]
        assert "max_concurrent_calls" in error["message"] and error["code"] == "overloaded"
        for task in held:
            task.cancel()
        await _until(lambda: backend.open == 0)
        async with FakeLLM(handler=lambda request: text("fine")) as llm:  # slots came back: a call goes through
            proxy.backend = RemoteBackend(llm.base_url)
            assert await _call(proxy.url, 10) == 200


def test_backends_wait_far_less_than_600_s_by_default() -> None:
    assert DEFAULT_BACKEND_TIMEOUT_S <= 120
    assert RemoteBackend("http://127.0.0.1:1/v1").timeout_s == DEFAULT_BACKEND_TIMEOUT_S
    assert HttpBackend("http://127.0.0.1:1").timeout_s == DEFAULT_BACKEND_TIMEOUT_S
    assert RemoteBackend("http://127.0.0.1:1/v1", timeout_s=5).timeout_s == 5


async def test_a_call_whose_span_the_store_could_not_hold_is_refused_on_record() -> None:
    """Issue 26 item 4: a 40 MB call was answered and its span refused by the store (32 MiB cap), so the agent
    got an answer whose transition vanished. Now the call gets 413 and a failed-call span says why."""
    from tether import spans
    from tether.types import RolloutSpec

    store = MemoryStore()
    (rollout,) = await store.enqueue([RolloutSpec(input="q")])
    ((_, attempt),) = await store.dequeue("w")
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 300_000}]}
    async with (
        FakeLLM(handler=lambda request: text("ok")) as llm,
        SpanBatcher(store) as batcher,
        ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, max_span_bytes=200_000) as proxy,
        proxy.attempt(rollout.rollout_id, attempt.attempt_id) as url,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(url + "/chat/completions", json=big) as r:
            assert r.status == 413
            error = (await r.json())["error"]
        assert "max_span_bytes" in error["message"] and error["code"] == "record_too_large"
        async with http.post(url + "/chat/completions", json=BODY) as r:  # a call that fits is answered
            assert r.status == 200
        await batcher.flush()
    recorded = await store.get_spans(attempt.attempt_id)
    assert [s.name for s in recorded] == [spans.LLM_CALL_FAILED, spans.LLM_CALL]
    assert "max_span_bytes" in recorded[0].attributes[spans.ERROR]
