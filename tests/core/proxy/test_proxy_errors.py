"""The proxy's failure paths: bad requests (400), attempts that are not open (404), backend failures (502),
that a rejected or failed call is on record as a failed-call span only, and that spans of good calls
survive a clean stop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from tether import spans
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import BackendError, ChatRequest, ChatResult, ModelBackend
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, error, text
from tether.types import Attempt, RolloutSpec, Span, SpanKind

USER = [{"role": "user", "content": "hi"}]


async def _attempt(store: MemoryStore) -> Attempt:
    await store.enqueue([RolloutSpec(input="q")])
    ((_, attempt),) = await store.dequeue("w")
    return attempt


@pytest.fixture
async def setup() -> AsyncIterator[tuple[MemoryStore, FakeLLM, ProxyServer, str]]:
    store = MemoryStore()
    attempt = await _attempt(store)
    async with (
        FakeLLM() as llm,
        SpanBatcher(store) as batcher,
        ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy,
        proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
    ):
        yield store, llm, proxy, url


async def _post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else None
    async with aiohttp.ClientSession() as session:
        kwargs: dict[str, Any] = (
            {"data": data, "headers": {"Content-Type": "application/json"}} if data is not None else {"json": body}
        )  # a body that says JSON, as OpenAI clients send: what is in it is the proxy's to check
        async with session.post(f"{url}/chat/completions", **kwargs) as resp:
            return resp.status, await resp.json()


BAD_REQUESTS = [
    (b"{not json", None, "not valid JSON"),
    ([1, 2], None, "JSON object"),
    ({"model": "m"}, "messages", "'messages' is required"),
    ({"messages": []}, "messages", "non-empty list"),
    ({"messages": ["hi"]}, "messages[0]", "must be an object"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "content is required"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content", "must be a string"),
    ({"messages": [*USER, {"role": "tool", "content": "r"}]}, "messages[1].tool_call_id", "tool_call_id"),
    ({"messages": USER, "temperature": 5}, "temperature", "between 0 and 2"),
    ({"messages": USER, "temperature": "hot"}, "temperature", "must be a number"),
    ({"messages": USER, "top_p": 1.5}, "top_p", "between 0 and 1"),
    ({"messages": USER, "n": 0}, "n", "between 1 and"),
    ({"messages": USER, "max_tokens": "ten"}, "max_tokens", "must be an integer"),
    ({"messages": USER, "max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens", "disagree"),
    ({"messages": USER, "max_tokens": 2**31}, "max_tokens", "between 1 and 2147483647"),
    ({"messages": USER, "max_completion_tokens": 2**31}, "max_completion_tokens", "between 1 and 2147483647"),
    ({"messages": USER, "max_tokens": 10**30}, "max_tokens", "between 1 and 2147483647"),
    ({"messages": USER, "stop": 3}, "stop", "'stop' must be"),
    ({"messages": USER, "stream": "yes"}, "stream", "true or false"),
    ({"messages": USER, "tools": {"name": "f"}}, "tools", "must be a list"),
    ({"messages": USER, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "name"),
    (
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}]},
        None,
        "JSON",
    ),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"function": {"name": "f", "arguments": {}}}],
                }
            ]
        },
        "messages[0].tool_calls[0].function.arguments",
        "JSON string",
    ),
]


@pytest.mark.parametrize(("body", "param", "message"), BAD_REQUESTS)
async def test_bad_request_is_400_and_stores_nothing(
    setup: tuple[MemoryStore, FakeLLM, ProxyServer, str], body: Any, param: str | None, message: str
) -> None:
    store, llm, proxy, url = setup
    status, data = await _post(url, body)
    assert status == 400
    assert data["error"]["type"] == "invalid_request_error"
    assert message in data["error"]["message"]
    if param is not None:
        assert data["error"]["param"] == param
    await proxy.flush()
    assert llm.requests == []  # never reached the backend
    (attempt_id,) = [url.split("/")[-2]]
    assert await store.get_spans(attempt_id) == []


async def test_openai_sdk_shows_the_reason(setup: tuple[MemoryStore, FakeLLM, ProxyServer, str]) -> None:
    _, _, _, url = setup
    client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="'temperature' must be between 0 and 2"):
        await client.chat.completions.create(model="m", messages=USER, temperature=3)  # type: ignore[arg-type]
    await client.close()


async def test_an_attempt_is_served_only_while_open(setup: tuple[MemoryStore, FakeLLM, ProxyServer, str]) -> None:
    store, llm, proxy, _ = setup
    other = await _attempt(store)
    closed_url = f"{proxy.url}/r/{other.rollout_id}/{other.attempt_id}/v1"
    status, data = await _post(closed_url, {"messages": USER})  # never opened: no store lookup decides this
    assert status == 404 and data["error"]["code"] == "unknown_attempt"
    message = data["error"]["message"]
    assert f"attempt {other.attempt_id!r} of rollout {other.rollout_id!r} is not open" in message
    assert "async with proxy.attempt(" in message
    llm.add(text("late", delay_s=0.2))
    async with proxy.attempt(other.rollout_id, other.attempt_id) as opened:
        assert opened == closed_url
        with pytest.raises(ValueError, match="already open"):
            async with proxy.attempt(other.rollout_id, other.attempt_id):
                pass
        in_flight = asyncio.create_task(_post(opened, {"messages": USER}))
        while not llm.requests:  # the call reached the backend
            await asyncio.sleep(0.005)
    # a call in flight when the attempt closes is answered and recorded; a call after it is refused
    status, data = await in_flight
    assert status == 200 and data["choices"][0]["message"]["content"] == "late"
    status, _ = await _post(closed_url, {"messages": USER})
    assert status == 404
    await proxy.flush()
    assert len(await store.get_spans(other.attempt_id)) == 1
    assert len(llm.chat_requests) == 1


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/nope", 404, "unknown_url"),
        ("POST", "/v1/completions", 404, "unknown_url"),
        ("POST", "/r/{rid}/{aid}/v1/embeddings", 404, "unknown_url"),
        ("POST", "/r//at-1/v1/chat/completions", 404, "unknown_url"),
        ("POST", "/r/ro-1//v1/chat/completions", 404, "unknown_url"),
        ("POST", "/r/ro-1", 404, "unknown_url"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
        ("GET", "/r/{rid}/{aid}/v1/chat/completions", 405, "method_not_allowed"),
        ("POST", "/v1/models", 405, "method_not_allowed"),
        ("DELETE", "/health", 405, "method_not_allowed"),
    ],
)
async def test_unknown_paths_and_methods_get_openai_shaped_errors(
    setup: tuple[MemoryStore, FakeLLM, ProxyServer, str], method: str, path: str, status: int, code: str
) -> None:
    _, llm, proxy, url = setup
    rid, aid = url.split("/")[-3:-1]
    async with aiohttp.ClientSession() as session:
        async with session.request(method, proxy.url + path.format(rid=rid, aid=aid), json={}) as resp:
            assert resp.status == status and resp.content_type == "application/json"
            data = await resp.json()
            allow = resp.headers.get("Allow")
    error = data["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["param"] is None
    assert f"{method} " in error["message"] and "/v1/chat/completions" in error["message"]
    assert (allow is not None) == (status == 405)
    assert llm.requests == []


async def test_the_openai_sdk_shows_why_a_url_is_wrong(
    setup: tuple[MemoryStore, FakeLLM, ProxyServer, str],
) -> None:
    _, _, proxy, _ = setup
    client = openai.AsyncOpenAI(base_url=f"{proxy.url}/r//at-1/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="names no rollout"):
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    await client.close()


@pytest.mark.parametrize("ids", [("", "at-1"), ("ro-1", "a/b")])
async def test_attempt_ids_must_fit_in_a_url(
    setup: tuple[MemoryStore, FakeLLM, ProxyServer, str], ids: tuple[str, str]
) -> None:
    _, _, proxy, _ = setup
    with pytest.raises(ValueError, match="without '/'"):
        async with proxy.attempt(*ids):
            pass


async def test_upstream_failures(setup: tuple[MemoryStore, FakeLLM, ProxyServer, str]) -> None:
    store, llm, proxy, url = setup
    llm.add(error(500, "GPU on fire"), error(400, "context too long"), error(401, "bad key"))
    status, data = await _post(url, {"messages": USER})
    assert status == 502 and "GPU on fire" in data["error"]["message"]
    status, data = await _post(url, {"messages": USER})
    assert status == 400 and "context too long" in data["error"]["message"]
    client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError, match="bad key") as info:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert info.value.status_code == 502
    await client.close()
    await proxy.flush()
    failed = await store.get_spans(url.split("/")[-2])
    assert [e.split(":")[0] for e in _errors(failed)] == [
        "the model backend failed",
        "the model backend rejected the request",
        "the model backend failed",
    ]
    assert [s.attributes["status"] for s in failed] == [502, 400, 502]
    assert "GPU on fire" in failed[0].attributes[spans.ERROR]
    assert failed[0].attributes["request"]["messages"] == USER


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_upstream_is_502() -> None:
    store = MemoryStore()
    attempt = await _attempt(store)
    backend = RemoteBackend(f"http://127.0.0.1:{_closed_port()}/v1", model="m")
    async with (
        SpanBatcher(store) as batcher,
        ProxyServer(backend, batcher=batcher, close_backend=True) as proxy,
        proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
    ):
        status, data = await _post(url, {"messages": USER})
    assert status == 502 and "cannot reach" in data["error"]["message"]
    assert data["error"]["type"] == "upstream_error"
    (failed,) = await store.get_spans(attempt.attempt_id)  # on record, never a transition
    assert failed.name == spans.LLM_CALL_FAILED and "cannot reach" in failed.attributes[spans.ERROR]


class _Broken(ModelBackend):
    """A backend that fails in the ways a buggy backend can."""

    name = "broken"

    def __init__(self) -> None:
        self.mode = "raise"

    async def chat(self, request: ChatRequest) -> ChatResult:
        if self.mode == "raise":
            raise ZeroDivisionError("oops")
        if self.mode == "backend":
            raise BackendError("out of memory")
        return ChatResult(choices=[], model="x")


async def test_backend_exceptions_and_malformed_results_are_502() -> None:
    store = MemoryStore()
    attempt = await _attempt(store)
    backend = _Broken()
    async with (
        SpanBatcher(store) as batcher,
        ProxyServer(backend, batcher=batcher) as proxy,
        proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
    ):
        for mode, expected in [
            ("raise", "ZeroDivisionError: oops"),
            ("backend", "out of memory"),
            ("empty", "no choices"),
        ]:
            backend.mode = mode
            status, data = await _post(url, {"messages": USER})
            assert status == 502 and expected in data["error"]["message"]
    errors = _errors(await store.get_spans(attempt.attempt_id))
    assert [
        expected in e
        for e, expected in zip(errors, ["ZeroDivisionError: oops", "out of memory", "no choices"], strict=True)
    ] == [True] * 3


def _errors(found: list[Span]) -> list[str]:
    """Each span's error, all of them failed-call spans (a failed call is on record, never a transition)."""
    assert all(s.kind == SpanKind.LLM and s.name == spans.LLM_CALL_FAILED for s in found), [s.name for s in found]
    return [s.attributes[spans.ERROR] for s in found]
