"""The backend over verl's vLLM servers, against two fake OpenAI servers: calls spread to the least busy,
every call names the served model and asks for token ids and logprobs, request defaults (top_k) added."""

from __future__ import annotations

import asyncio

import pytest

from tether.algorithms.verl.pool import ServerPool, base_url, served_model
from tether.models.base import BackendError, ChatRequest
from tether.testing.fake_llm import FakeLLM, text


def test_verl_addresses_become_openai_base_urls() -> None:
    assert base_url("10.0.0.7:8000") == "http://10.0.0.7:8000/v1"
    assert base_url("[::1]:8000") == "http://[::1]:8000/v1"
    assert base_url("http://h:1/v1/") == "http://h:1/v1"


async def test_calls_go_to_the_least_busy_server_with_the_served_model() -> None:
    slow = text("hello", delay_s=0.2)
    async with FakeLLM(handler=lambda r: slow, model="/models/qwen") as a, FakeLLM(handler=lambda r: slow) as b:
        pool = ServerPool([f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"], defaults={"top_k": 20})
        await pool.start()
        try:
            request = {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o"}
            results = await asyncio.gather(*(pool.chat(ChatRequest(**request)) for _ in range(4)))
        finally:
            await pool.close()
    assert pool.calls == [2, 2]
    sent = a.chat_requests + b.chat_requests
    assert {r["model"] for r in sent} == {"/models/qwen"}  # the first server's model, not the agent's name
    assert all(r["return_token_ids"] and r["logprobs"] and r["top_k"] == 20 for r in sent)
    assert all(res.choices[0].response_token_ids == list(b"hello") for res in results)
    assert all(res.prompt_token_ids for res in results)


async def test_an_unreachable_server_is_a_clear_backend_error() -> None:
    with pytest.raises(BackendError, match="cannot list the models"):
        await served_model("http://127.0.0.1:9/v1", timeout_s=5)
    with pytest.raises(ValueError, match="get_addresses"):
        ServerPool([])
