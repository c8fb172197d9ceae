"""The proxy end to end: real openai SDK → ProxyServer → RemoteBackend → FakeLLM, spans in a MemoryStore."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import openai
import pytest

from tether import spans
from tether._seeds import derive_seed
from tether.capture.context import AGENT_HEADER, CALL_ID_HEADER
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import ChatRequest, ChatResult, Choice, ModelBackend
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text, tool_call, tool_calls
from tether.types import Attempt, RolloutSpec, Span, SpanKind

USER = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {"name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


@dataclass
class Rig:
    store: MemoryStore
    llm: FakeLLM
    proxy: ProxyServer
    attempt: Attempt
    url: str  # the attempt's OpenAI base URL, open for the whole test

    async def spans(self) -> list[Span]:
        await self.proxy.flush()
        return await self.store.get_spans(self.attempt.attempt_id)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    store = MemoryStore()
    await store.enqueue([RolloutSpec(input="q")])
    ((_, attempt),) = await store.dequeue("w")
    async with FakeLLM() as llm, SpanBatcher(store) as batcher:
        backend = RemoteBackend(llm.base_url, return_token_ids=True, logprobs=True)
        async with (
            ProxyServer(backend, batcher=batcher, close_backend=True) as proxy,
            proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
        ):
            yield Rig(store, llm, proxy, attempt, url)


async def test_async_client_text_and_span(rig: Rig) -> None:
    rig.llm.add(text("Paris"))
    client = openai.AsyncOpenAI(
        base_url=rig.url, api_key="k", default_headers={AGENT_HEADER: "planner", CALL_ID_HEADER: "call-1"}
    )
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "capital of France?"}]
    out = await client.chat.completions.create(
        model="gpt-x",
        messages=messages,
        temperature=0.2,
        top_p=0.9,
        max_tokens=20,
        seed=7,
        stop=["\n"],  # type: ignore[arg-type]
    )
    await client.close()
    assert out.choices[0].message.content == "Paris"
    assert out.usage is not None and out.usage.completion_tokens == len(b"Paris")

    (span,) = await rig.spans()
    assert span.kind == SpanKind.LLM and span.name == spans.LLM_CALL
    assert span.rollout_id == rig.attempt.rollout_id and span.agent_name == "planner"
    a = span.attributes
    assert a["call_id"] == "call-1"
    assert a["request"]["messages"] == messages and a["request"]["tools"] is None
    assert a["request"]["params"] == {
        "model": "gpt-x",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 20,
        "n": 1,
        "stop": ["\n"],
        "seed": 7,
        "stream": False,
    }
    (choice,) = a["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Paris"}
    assert choice["finish_reason"] == "stop"
    assert bytes(choice["response_token_ids"]).decode() == "Paris"  # the fake LLM's tokens are UTF-8 bytes
    assert choice["logprobs"] == [-0.5] * 5
    assert json.loads(bytes(a["prompt_token_ids"])) == messages
    assert a["token_ids_available"] is True
    assert a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] + 5
    assert a["model"] == "gpt-x" and a["latency_ms"] > 0
    assert a[spans.WEIGHTS_VERSION] is None  # a remote backend does not know which weights answered
    # what went upstream: sampling params and vLLM's token-id flags
    sent = rig.llm.chat_requests[0]
    assert sent["return_token_ids"] is True and sent["logprobs"] is True and sent["max_tokens"] == 20


async def test_tool_calls_and_tool_results_round_trip(rig: Rig) -> None:
    rig.llm.add(tool_calls(("weather", {"city": "Oslo"}), ("weather", {"city": "Rome"})), text("cold, warm"))
    client = openai.AsyncOpenAI(base_url=rig.url, api_key="k")
    messages: list = [{"role": "user", "content": "weather in Oslo and Rome?"}]
    first = await client.chat.completions.create(model="m", messages=messages, tools=[WEATHER])  # type: ignore[list-item]
    calls = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls"
    assert [json.loads(c.function.arguments)["city"] for c in calls] == ["Oslo", "Rome"]  # type: ignore[union-attr]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "x"} for c in calls]
    second = await client.chat.completions.create(model="m", messages=messages, tools=[WEATHER])  # type: ignore[list-item]
    assert second.choices[0].message.content == "cold, warm"
    await client.close()

    s1, s2 = await rig.spans()
    assert [s.sequence for s in (s1, s2)] == [0, 1]
    assert s1.attributes["request"]["tools"] == [WEATHER]
    stored_calls = s1.attributes["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in stored_calls] == ["weather", "weather"]
    assert s2.attributes["request"]["messages"][2]["tool_call_id"] == calls[0].id
    assert s1.attributes["call_id"] != s2.attributes["call_id"]  # generated when the header is absent


async def test_stream_ends_with_usage_even_unasked(rig: Rig) -> None:
    rig.llm.add(tool_call("weather", {"city": "Lima"}, content="let me check"))
    client = openai.AsyncOpenAI(base_url=rig.url, api_key="k")
    stream = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=[WEATHER],
        stream=True,  # type: ignore[list-item]
    )
    chunks = [chunk async for chunk in stream]
    await client.close()
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    args = "".join(
        (tc.function.arguments or "")
        for c in chunks
        if c.choices
        for tc in c.choices[0].delta.tool_calls or []  # type: ignore[union-attr]
    )
    assert content == "let me check" and json.loads(args) == {"city": "Lima"}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    (span,) = await rig.spans()
    assert span.attributes["request"]["params"]["stream"] is True
    assert span.attributes["choices"][0]["message"]["content"] == "let me check"
    assert rig.llm.chat_requests[0].get("stream") is None  # upstream is asked non-streaming


async def test_sync_openai_client_in_a_thread(rig: Rig) -> None:
    """Sync agents run in threads while the proxy's loop keeps serving."""
    rig.llm.add(text("one"), [text("a"), text("b")], text("streamed text"))

    def agent() -> tuple[str, list[str], str]:
        client = openai.OpenAI(base_url=rig.url, api_key="k")
        msgs = [{"role": "user", "content": "x"}]
        one = client.chat.completions.create(model="m", messages=msgs).choices[0].message.content  # type: ignore[arg-type]
        many = client.chat.completions.create(model="m", messages=msgs, n=2)  # type: ignore[arg-type]
        stream = client.chat.completions.create(model="m", messages=msgs, stream=True)  # type: ignore[arg-type]
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        models = [m.id for m in client.models.list()]
        client.close()
        assert models
        return one or "", [c.message.content or "" for c in many.choices], streamed

    one, many, streamed = await asyncio.to_thread(agent)
    assert (one, many, streamed) == ("one", ["a", "b"], "streamed text")
    spans = await rig.spans()
    assert len(spans) == 3
    assert [c["message"]["content"] for c in spans[1].attributes["choices"]] == ["a", "b"]
    assert spans[1].attributes["request"]["params"]["n"] == 2


async def test_models_endpoint(rig: Rig) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{rig.url}/models") as resp:
        assert resp.status == 200
        data = await resp.json()
    assert data["object"] == "list" and data["data"][0]["id"] == "remote"


async def test_unrecorded_route(rig: Rig) -> None:
    rig.llm.add("free")
    client = openai.AsyncOpenAI(base_url=f"{rig.proxy.url}/v1", api_key="k")
    out = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert out.choices[0].message.content == "free"
    assert await rig.spans() == []  # no rollout in the URL: served, not recorded
    await client.close()


class _Mutating(ModelBackend):
    """A backend that edits the request it was given and keeps its answer to edit it later."""

    name = "mutating"

    def __init__(self) -> None:
        self.answers: list[dict] = []

    async def chat(self, request: ChatRequest) -> ChatResult:
        request.messages[0]["content"] = "edited by the backend"
        message = {"role": "assistant", "content": "answer"}
        self.answers.append(message)
        return ChatResult([Choice(message, "stop", [5, 6], [-0.1, -0.2])], model="mut", prompt_token_ids=[1, 2])


async def test_span_shares_nothing_with_backend_or_client() -> None:
    store = MemoryStore()
    await store.enqueue([RolloutSpec(input="q")])
    ((_, attempt),) = await store.dequeue("w")
    backend = _Mutating()
    batcher = SpanBatcher(store, max_delay_s=3600)
    async with (
        ProxyServer(backend, batcher=batcher) as proxy,
        proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
    ):
        client = openai.AsyncOpenAI(base_url=url, api_key="k")
        out = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "original"}])
        await client.close()
        assert out.choices[0].message.content == "answer"
        backend.answers[0]["content"] = "edited after the call"
    await batcher.close()
    (span,) = await store.get_spans(attempt.attempt_id)
    assert span.attributes["request"]["messages"] == [{"role": "user", "content": "original"}]
    assert span.attributes["choices"][0]["message"]["content"] == "answer"
    assert span.attributes["prompt_token_ids"] == [1, 2] and span.attributes["token_ids_available"] is True
    assert span.attributes["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}


async def test_attempt_sampling_overrides_what_the_agent_asks(rig: Rig) -> None:
    await rig.store.enqueue([RolloutSpec(input="q2")])
    ((_, other),) = await rig.store.dequeue("w")
    sampling = {"temperature": 0.0, "top_p": None, "max_tokens": 7, "seed": 3, "n": 5}  # None, n: not applied
    rig.llm.add(text("a"), text("b"))
    async with rig.proxy.attempt(other.rollout_id, other.attempt_id, sampling) as url:
        client = openai.AsyncOpenAI(base_url=url, api_key="k")
        await client.chat.completions.create(
            model="m",
            messages=USER,  # type: ignore[arg-type]
            temperature=0.9,
            top_p=0.5,
            max_tokens=99,
        )
        await client.close()
    client = openai.AsyncOpenAI(base_url=rig.url, api_key="k")  # the rig's attempt has no sampling of its own
    await client.chat.completions.create(model="m", messages=USER, temperature=0.9, max_tokens=99)  # type: ignore[arg-type]
    await client.close()
    overridden, untouched = rig.llm.chat_requests
    assert (overridden["temperature"], overridden["top_p"], overridden["max_tokens"]) == (0.0, 0.5, 7)
    assert overridden["seed"] == derive_seed(3, 0) and overridden.get("n", 1) == 1  # the attempt's first call
    assert (untouched["temperature"], untouched["max_tokens"]) == (0.9, 99) and "seed" not in untouched
    await rig.proxy.flush()
    (span,) = await rig.store.get_spans(other.attempt_id)
    params = span.attributes["request"]["params"]
    assert (params["temperature"], params["top_p"], params["max_tokens"]) == (0.0, 0.5, 7)
    assert params["seed"] == derive_seed(3, 0)
