"""Issue 37 item 1: the proxy follows every tether server's bind rule. Beyond loopback it needs a token; with one,
each request must carry it (``X-Tether-Token`` or ``Authorization: Bearer``); the runner's redirect sends it.

A real proxy in front of the fake LLM, called over HTTP and by a plain ``openai`` agent run by a real
``Runner``."""

from __future__ import annotations

import aiohttp
import openai
import pytest

import tether
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text
from tether.training.engine.runner import Runner
from tether.types import LLMEndpoint, RolloutSpec, SpanKind

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7"])
def test_no_token_beyond_loopback_is_refused(host: str) -> None:
    refused = r"refusing to serve the proxy on .* without a token.*ProxyServer\(token="
    with pytest.raises(ValueError, match=refused):
        ProxyServer(RemoteBackend("http://127.0.0.1:1/v1"), batcher=SpanBatcher(MemoryStore()), host=host)
    ProxyServer(RemoteBackend("http://127.0.0.1:1/v1"), batcher=SpanBatcher(MemoryStore()), host=host, token="t")


async def test_with_a_token_every_call_needs_it() -> None:
    async with (
        FakeLLM(handler=lambda request: text("hello")) as llm,
        SpanBatcher(MemoryStore()) as batcher,
        ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True, token="s3cret") as proxy,
        aiohttp.ClientSession() as http,
    ):
        url = proxy.url + "/v1/chat/completions"
        for headers in ({}, {"X-Tether-Token": "wrong"}, {"Authorization": "Bearer wrong"}):
            async with http.post(url, json=CHAT, headers=headers) as r:
                assert r.status == 401
                assert "proxy token" in (await r.json())["error"]["message"]
        async with http.get(proxy.url + "/v1/models") as r:
            assert r.status == 401
        for headers in ({"X-Tether-Token": "s3cret"}, {"Authorization": "Bearer s3cret"}):
            async with http.post(url, json=CHAT, headers=headers) as r:
                assert r.status == 200
                assert (await r.json())["choices"][0]["message"]["content"] == "hello"
        async with http.get(proxy.url + "/health") as r:  # liveness needs no token
            assert r.status == 200
        assert len(llm.chat_requests) == 2  # the refused calls never reached the model


async def test_the_runner_passes_the_proxy_token() -> None:
    """A plain openai agent, its client built with its own key and URL, reaches a tokened proxy through the
    runner's redirect, and its call is recorded."""
    client = openai.AsyncOpenAI(api_key="sk-agent", base_url="http://127.0.0.1:9/v1")

    async def agent(task: str) -> str:
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": task}])
        return reply.choices[0].message.content or ""

    store = MemoryStore()
    async with (
        FakeLLM(handler=lambda request: text("hello")) as llm,
        SpanBatcher(store) as batcher,
        ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True, token="s3cret") as proxy,
    ):
        await store.add_resources(llm=LLMEndpoint(proxy.url))
        (rollout,) = await store.enqueue([RolloutSpec(input="q")])
        wrapped = tether.wrap(agent, reward=lambda t, o: float(o == "hello"))
        async with Runner(wrapped, store, proxy, batcher=batcher, concurrency=1) as runner:
            stats = await runner.run_until_idle()
    assert stats.succeeded == 1
    (attempt,) = await store.get_attempts(rollout.rollout_id)
    spans = await store.get_spans(attempt.attempt_id)
    assert [s.name for s in spans if s.kind == SpanKind.LLM and s.attributes.get("error") is None]
    assert len(llm.chat_requests) == 1
