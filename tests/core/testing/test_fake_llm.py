"""The scripted fake LLM, driven by the real openai SDK (sync and async, streaming, tools, errors)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest

from tether.testing.fake_llm import FakeLLM, error, text, tool_call, tool_calls


async def test_async_text_then_tool_calls_in_order() -> None:
    script = [text("hello"), tool_call("add", {"a": 1, "b": 2}), tool_calls(("f", {"x": 1}), ("g", {"y": "z"}))]
    async with FakeLLM(script) as llm:
        assert llm.base_url.endswith("/v1")
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="k")
        msgs = [{"role": "user", "content": "hi"}]
        first = await client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        assert first.choices[0].message.content == "hello"
        assert first.choices[0].finish_reason == "stop"
        assert first.usage is not None and first.usage.completion_tokens == len(b"hello")

        second = await client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        calls = second.choices[0].message.tool_calls
        assert second.choices[0].finish_reason == "tool_calls"
        assert calls is not None and len(calls) == 1
        assert calls[0].function.name == "add"  # type: ignore[union-attr]
        assert json.loads(calls[0].function.arguments) == {"a": 1, "b": 2}  # type: ignore[union-attr]

        third = await client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        names = [c.function.name for c in third.choices[0].message.tool_calls or []]  # type: ignore[union-attr]
        assert names == ["f", "g"]
        assert llm.remaining == 0

        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            await client.with_options(max_retries=0).chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        await client.close()


async def test_records_requests_with_headers_and_handler() -> None:
    seen: list[str] = []

    def handler(req: dict) -> str:
        seen.append(req["messages"][-1]["content"])
        return f"echo {req['messages'][-1]['content']}"

    async with FakeLLM(handler=handler) as llm:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="k", default_headers={"X-Tether-Agent": "w"})
        out = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "ping"}], temperature=0.3
        )
        assert out.choices[0].message.content == "echo ping"
        assert seen == ["ping"]
        assert len(llm.requests) == 1
        assert llm.requests[0].headers["x-tether-agent"] == "w"
        assert llm.requests[0].json["temperature"] == 0.3
        await client.close()


async def test_n_choices_and_per_choice_replies() -> None:
    async with FakeLLM([[text("a"), text("b")], "same"]) as llm:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="k")
        msgs = [{"role": "user", "content": "x"}]
        out = await client.chat.completions.create(model="m", messages=msgs, n=2)  # type: ignore[arg-type]
        assert [c.message.content for c in out.choices] == ["a", "b"]
        out = await client.chat.completions.create(model="m", messages=msgs, n=3)  # type: ignore[arg-type]
        assert [c.message.content for c in out.choices] == ["same"] * 3
        assert [c.index for c in out.choices] == [0, 1, 2]
        await client.close()


async def test_async_stream_with_tool_calls_and_usage() -> None:
    async with FakeLLM([tool_call("lookup", {"q": "a long query string"}, content="thinking")]) as llm:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="k")
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        content = ""
        args = ""
        name = None
        finish = None
        usage = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    if call.function and call.function.name:
                        name = call.function.name
                    args += (call.function.arguments or "") if call.function else ""
                finish = choice.finish_reason or finish
        assert content == "thinking"
        assert name == "lookup" and json.loads(args) == {"q": "a long query string"}
        assert finish == "tool_calls"
        assert usage is not None and usage.total_tokens > 0
        await client.close()


async def test_error_reply_is_an_openai_error() -> None:
    async with FakeLLM([error(429, "slow down"), error(400, "bad thing")]) as llm:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="k", max_retries=0)
        msgs = [{"role": "user", "content": "x"}]
        with pytest.raises(openai.RateLimitError, match="slow down"):
            await client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        with pytest.raises(openai.BadRequestError, match="bad thing"):
            await client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
        await client.close()


async def test_token_ids_and_logprobs_vllm_style() -> None:
    async with FakeLLM(["héllo"]) as llm, aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "return_token_ids": True}
        body["logprobs"] = True
        async with session.post(f"{llm.base_url}/chat/completions", json=body) as resp:
            data = await resp.json()
        choice = data["choices"][0]
        assert bytes(choice["token_ids"]).decode() == "héllo"
        assert bytes(data["prompt_token_ids"]).decode() == json.dumps(body["messages"], separators=(",", ":"))
        assert [e["logprob"] for e in choice["logprobs"]["content"]] == [-0.5] * len(choice["token_ids"])
        assert data["usage"]["completion_tokens"] == len(choice["token_ids"])


async def test_token_ids_absent_unless_asked() -> None:
    async with FakeLLM(["hi"]) as llm, aiohttp.ClientSession() as session:
        body = {"messages": [{"role": "user", "content": "x"}]}
        async with session.post(f"{llm.base_url}/chat/completions", json=body) as resp:
            data = await resp.json()
        assert "prompt_token_ids" not in data and "token_ids" not in data["choices"][0]
        async with session.post(f"{llm.base_url}/chat/completions", json={"nope": 1}) as resp:
            assert resp.status == 400
            assert "messages" in (await resp.json())["error"]["message"]


def test_sync_client_from_thread_and_models_endpoint() -> None:
    with FakeLLM(["one", "two"], model="tiny") as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="k")
        msgs = [{"role": "user", "content": "x"}]
        assert client.chat.completions.create(model="m", messages=msgs).choices[0].message.content == "one"  # type: ignore[arg-type]
        stream = client.chat.completions.create(model="m", messages=msgs, stream=True)  # type: ignore[arg-type]
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "two"
        assert [m.id for m in client.models.list()] == ["tiny"]
        client.close()
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=llm.base_url, api_key="k", max_retries=0).models.list()


def test_start_in_thread_stop_is_idempotent() -> None:
    llm = FakeLLM(default="d").start_in_thread()
    try:
        client = openai.OpenAI(base_url=llm.base_url, api_key="k")
        for _ in range(3):
            out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            assert out.choices[0].message.content == "d"
        client.close()
    finally:
        llm.stop()
    llm.stop()


async def test_delay_allows_concurrency() -> None:
    async with FakeLLM(default=text("slow", delay_s=0.05)) as llm:
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="k")
        msgs = [{"role": "user", "content": "x"}]
        outs = await asyncio.gather(*[client.chat.completions.create(model="m", messages=msgs) for _ in range(10)])  # type: ignore[arg-type]
        assert all(o.choices[0].message.content == "slow" for o in outs)
        assert len(llm.requests) == 10
        await client.close()
