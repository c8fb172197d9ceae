"""The endpoint redirect: requests from clients built before tether reach the rollout's URL inside a scope,
with the agent and call-id headers, and their own URL outside it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import openai
import pytest
import pytest_asyncio
from aiohttp import web
from openai._base_client import BaseClient

from tether.capture import redirect
from tether.capture.context import (
    AGENT_HEADER,
    CALL_ID_HEADER,
    RolloutScope,
    add_agent_resolver,
    agent_scope,
    decode_agent_header,
    remove_agent_resolver,
    rollout_scope,
)
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text


def _scope(base_url: str, rollout: str = "ro-1") -> RolloutScope:
    return RolloutScope(rollout_id=rollout, attempt_id="at-1", base_url=base_url)


def _echo(request: dict[str, Any]) -> Any:
    return text("echo: " + request["messages"][-1]["content"])


@pytest.fixture
def redirected() -> Iterator[None]:
    with redirect.installed():
        yield


@pytest_asyncio.fixture(loop_scope="session")
async def two_llms() -> AsyncIterator[tuple[FakeLLM, FakeLLM]]:
    async with FakeLLM(handler=_echo) as a, FakeLLM(handler=_echo) as b:
        yield a, b


# -- sync and async clients built at import time -------------------------------------------------------------


def test_sync_client_inside_scope_reaches_scope_url_with_headers(
    agent_module: ModuleType, redirected: None
) -> None:
    with FakeLLM(handler=_echo) as llm:
        with rollout_scope(_scope(llm.base_url)), agent_scope("solver"):
            out = agent_module.answer("hello")
            call_id = redirect.last_call_id.get()
    assert out == "echo: hello"
    (req,) = llm.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers[AGENT_HEADER] == "solver"
    assert req.headers[CALL_ID_HEADER] == call_id and call_id
    assert req.headers["Host"] == f"127.0.0.1:{llm.port}"
    assert req.headers["Authorization"] == "Bearer sk-user"
    assert req.json["messages"] == [{"role": "user", "content": "hello"}]


def test_outside_scope_requests_go_to_the_clients_own_url(agent_module: ModuleType, redirected: None) -> None:
    with FakeLLM(handler=_echo) as llm:
        with rollout_scope(_scope(llm.base_url)):
            agent_module.answer("inside")
        with pytest.raises(openai.APIConnectionError):
            agent_module.answer("outside")  # port 9: nothing listens there
    assert [r.json["messages"][0]["content"] for r in llm.requests] == ["inside"]


async def test_client_with_own_server_goes_back_to_it_outside_scope(two_llms: tuple[FakeLLM, FakeLLM]) -> None:
    scoped, own = two_llms
    client = openai.AsyncOpenAI(base_url=own.base_url, api_key="x", max_retries=0)  # built before install
    with redirect.installed():
        with rollout_scope(_scope(scoped.base_url)):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "in"}])
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "out"}])
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "after"}])
    await client.close()
    assert [r.json["messages"][0]["content"] for r in scoped.requests] == ["in"]
    assert [r.json["messages"][0]["content"] for r in own.requests] == ["out", "after"]
    assert all(AGENT_HEADER not in r.headers and CALL_ID_HEADER not in r.headers for r in own.requests)


async def test_async_client_inside_scope(agent_module: ModuleType, two_llms: tuple[FakeLLM, FakeLLM]) -> None:
    llm, _ = two_llms
    with redirect.installed(), rollout_scope(_scope(llm.base_url)), agent_scope("planner"):
        assert await agent_module.aanswer("hi") == "echo: hi"
    (req,) = llm.requests
    assert req.headers[AGENT_HEADER] == "planner"


def test_streaming_request_is_redirected(agent_module: ModuleType, redirected: None) -> None:
    with FakeLLM(handler=_echo) as llm:
        with rollout_scope(_scope(llm.base_url)):
            assert agent_module.answer_streamed("abc") == "echo: abc"
    (req,) = llm.requests
    assert req.json["stream"] is True


def test_without_agent_name_no_agent_header_and_fresh_call_ids(agent_module: ModuleType, redirected: None) -> None:
    with FakeLLM(handler=_echo) as llm:
        with rollout_scope(_scope(llm.base_url)):
            agent_module.answer("one")
            agent_module.answer("two")
    assert all(AGENT_HEADER not in r.headers for r in llm.requests)
    ids = [r.headers[CALL_ID_HEADER] for r in llm.requests]
    assert len(ids) == 2 and ids[0] != ids[1]


def test_agent_name_from_a_resolver(agent_module: ModuleType, redirected: None) -> None:
    def resolver() -> str | None:
        return "node_from_framework"

    add_agent_resolver(resolver)
    try:
        with FakeLLM(handler=_echo) as llm, rollout_scope(_scope(llm.base_url)):
            agent_module.answer("q")
    finally:
        remove_agent_resolver(resolver)
    assert llm.requests[0].headers[AGENT_HEADER] == "node_from_framework"


def test_caller_supplied_call_id_is_kept(agent_module: ModuleType, redirected: None) -> None:
    with FakeLLM(handler=_echo) as llm, rollout_scope(_scope(llm.base_url)):
        agent_module.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], extra_headers={CALL_ID_HEADER: "mine"}
        )
        assert redirect.last_call_id.get() == "mine"
    assert llm.requests[0].headers[CALL_ID_HEADER] == "mine"


# -- concurrency: one event loop, and worker threads -----------------------------------------------------------


async def test_two_concurrent_rollouts_in_one_loop_each_reach_their_own_url(
    agent_module: ModuleType, two_llms: tuple[FakeLLM, FakeLLM]
) -> None:
    a, b = two_llms
    a.handler = lambda req: text("from a", delay_s=0.2)  # a's answer is still pending while b's request is built
    both_sent = asyncio.Event()

    async def rollout(llm: FakeLLM, name: str) -> list[str]:
        with rollout_scope(_scope(llm.base_url, rollout=name)), agent_scope(name):
            first = await agent_module.aanswer(f"{name} 1")
            if name == "b":
                both_sent.set()
            await both_sent.wait()
            second = await agent_module.aanswer(f"{name} 2")
            return [first, second]

    with redirect.installed():
        out_a, out_b = await asyncio.gather(rollout(a, "a"), rollout(b, "b"))
    assert out_a == ["from a", "from a"]
    assert out_b == ["echo: b 1", "echo: b 2"]
    assert [r.json["messages"][0]["content"] for r in a.requests] == ["a 1", "a 2"]
    assert [r.json["messages"][0]["content"] for r in b.requests] == ["b 1", "b 2"]
    assert {r.headers[AGENT_HEADER] for r in a.requests} == {"a"}
    assert {r.headers[AGENT_HEADER] for r in b.requests} == {"b"}


async def test_to_thread_calls_carry_their_rollouts_scope(
    agent_module: ModuleType, two_llms: tuple[FakeLLM, FakeLLM]
) -> None:
    a, b = two_llms

    async def rollout(llm: FakeLLM, name: str) -> list[str]:
        with rollout_scope(_scope(llm.base_url, rollout=name)), agent_scope(name):
            return [await asyncio.to_thread(agent_module.answer, f"{name} {i}") for i in range(3)]

    with redirect.installed():
        out_a, out_b = await asyncio.gather(rollout(a, "a"), rollout(b, "b"))
    assert out_a == [f"echo: a {i}" for i in range(3)]
    assert out_b == [f"echo: b {i}" for i in range(3)]
    for llm, name in ((a, "a"), (b, "b")):
        assert len(llm.requests) == 3
        assert all(r.headers[AGENT_HEADER] == name for r in llm.requests)
        assert all(r.json["messages"][0]["content"].startswith(name) for r in llm.requests)


# -- URL rewriting -----------------------------------------------------------------------------------------


async def test_path_after_base_url_and_query_are_kept() -> None:
    seen: list[tuple[str, str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append((request.path, request.query_string, request.headers.get("Host", "")))
        return web.json_response({"object": "list", "data": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        # the client's own base URL has a path of its own; only the part after it (and the query) moves
        client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/api/openai/v1", api_key="x", max_retries=0)
        proxy = f"http://127.0.0.1:{port}/r/ro-9/at-2/v1/"
        with redirect.installed(), rollout_scope(_scope(proxy)):
            await client.models.list(extra_query={"tenant": "7"})
        await client.close()
    finally:
        await runner.cleanup()
    assert seen == [("/r/ro-9/at-2/v1/models", "tenant=7", f"127.0.0.1:{port}")]


async def test_responses_api_calls_are_redirected_and_served_by_the_proxy(
    agent_module: ModuleType, redirected: None
) -> None:
    async with FakeLLM(handler=_echo) as llm, SpanBatcher(MemoryStore()) as batcher:
        async with ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy:
            with rollout_scope(_scope(proxy.url + "/v1", rollout="ro-r")), agent_scope("summarizer"):
                out = await asyncio.to_thread(agent_module.summarize, "x")
    assert out == "echo: x"  # the proxy translated the Responses call to the chat call the fake LLM answers
    (req,) = llm.requests
    assert req.path == "/v1/chat/completions" and req.json["messages"] == [{"role": "user", "content": "x"}]


# -- install / uninstall -----------------------------------------------------------------------------------


def test_install_is_reference_counted_and_uninstall_restores_the_exact_function() -> None:
    original = BaseClient.__dict__["_build_request"]
    redirect.uninstall()  # not installed: no-op
    assert BaseClient.__dict__["_build_request"] is original
    redirect.install()
    patched = BaseClient.__dict__["_build_request"]
    assert patched is not original and patched.__wrapped__ is original
    redirect.install()
    assert BaseClient.__dict__["_build_request"] is patched, "a second install must not wrap again"
    redirect.uninstall()
    assert BaseClient.__dict__["_build_request"] is patched and redirect.is_installed()
    redirect.uninstall()
    assert BaseClient.__dict__["_build_request"] is original and not redirect.is_installed()
    redirect.uninstall()
    assert BaseClient.__dict__["_build_request"] is original


def test_uninstall_under_a_foreign_patch_turns_ours_into_a_pass_through(agent_module: ModuleType) -> None:
    original = BaseClient.__dict__["_build_request"]
    redirect.install()
    ours = BaseClient.__dict__["_build_request"]
    calls: list[str] = []

    def foreign(self: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(options.url)
        return ours(self, options, *args, **kwargs)

    foreign.__wrapped__ = ours  # type: ignore[attr-defined]
    BaseClient._build_request = foreign  # type: ignore[method-assign]
    try:
        redirect.uninstall()
        assert BaseClient.__dict__["_build_request"] is foreign, "someone else's patch must stay in place"
        with FakeLLM(handler=_echo) as llm, rollout_scope(_scope(llm.base_url)):
            with pytest.raises(openai.APIConnectionError):
                agent_module.answer("not redirected")  # went to port 9
            assert llm.requests == []
            redirect.install()  # re-activates the linked wrapper rather than stacking a new one
            assert BaseClient.__dict__["_build_request"] is foreign
            assert agent_module.answer("redirected") == "echo: redirected"
            redirect.uninstall()
        assert calls == ["/chat/completions", "/chat/completions"]
    finally:
        BaseClient._build_request = original  # type: ignore[method-assign]


def test_listeners_see_each_redirected_body_and_cannot_break_the_call(
    agent_module: ModuleType, redirected: None
) -> None:
    bodies: list[tuple[str, str, str]] = []

    def record(body: Any, scope: RolloutScope, call_id: str) -> None:
        bodies.append((body["messages"][0]["content"], scope.rollout_id, call_id))

    def broken(body: Any, scope: RolloutScope, call_id: str) -> None:
        raise RuntimeError("capture bug")

    redirect.add_listener(broken)
    redirect.add_listener(record)
    redirect.add_listener(record)  # idempotent
    try:
        with FakeLLM(handler=_echo) as llm:
            with rollout_scope(_scope(llm.base_url, rollout="ro-l")):
                assert agent_module.answer("seen") == "echo: seen"
            with pytest.raises(openai.APIConnectionError):
                agent_module.answer("outside: not redirected, not seen")
    finally:
        redirect.remove_listener(broken)
        redirect.remove_listener(record)
    assert bodies == [("seen", "ro-l", llm.requests[0].headers[CALL_ID_HEADER])]


def test_non_ascii_agent_names_reach_the_server(agent_module: ModuleType, redirected: None) -> None:
    with FakeLLM(handler=_echo) as llm, rollout_scope(_scope(llm.base_url)), agent_scope("rédacteur"):
        assert agent_module.answer("q") == "echo: q"
    # percent-encoded UTF-8 (any name is a valid header value), decoded by the proxy
    assert llm.requests[0].headers[AGENT_HEADER] == "r%C3%A9dacteur"
    assert decode_agent_header(llm.requests[0].headers[AGENT_HEADER]) == "rédacteur"
