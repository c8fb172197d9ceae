"""The proxy on uvloop's event loop: an application that runs its agents under uvloop (uvicorn's default, or
``uvloop.run``) gets the same answers and the same recorded spans, timeouts included, as on asyncio's loop.

uvloop's transports are not subclasses of ``asyncio.Transport``; the proxy's HTTP server once asserted they were,
and so dropped every connection under uvloop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import openai
import pytest

from tether.capture.context import AGENT_HEADER
from tether.capture.span_batcher import SpanBatcher
from tether.models.base import BackendError, ChatRequest
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text
from tether.types import RolloutSpec

uvloop = pytest.importorskip("uvloop", reason="the core tox env installs uvloop")
_T = TypeVar("_T")


def _on_uvloop(main: Coroutine[Any, Any, _T]) -> _T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def test_a_recorded_call_and_a_stream_through_the_proxy_on_uvloop() -> None:
    async def main() -> tuple[list[str | None], list[tuple[str | None, str]], str]:
        store = MemoryStore()
        await store.enqueue([RolloutSpec(input="q")])
        ((_, attempt),) = await store.dequeue("w")
        async with FakeLLM() as llm, SpanBatcher(store) as batcher:
            llm.add(text("Paris"), text("Rome"))
            backend = RemoteBackend(llm.base_url, return_token_ids=True)
            async with (
                ProxyServer(backend, batcher=batcher, close_backend=True) as proxy,
                proxy.attempt(attempt.rollout_id, attempt.attempt_id) as url,
            ):
                client = openai.AsyncOpenAI(
                    base_url=url, api_key="k", default_headers={AGENT_HEADER: "planner"}, max_retries=0, timeout=10
                )
                user = [{"role": "user", "content": "a capital?"}]
                answer = await client.chat.completions.create(model="m", messages=user)  # type: ignore[arg-type]
                stream = await client.chat.completions.create(model="m", messages=user, stream=True)  # type: ignore[arg-type]
                pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]  # type: ignore[union-attr]
                streamed = "".join(piece or "" for piece in pieces)
                await client.close()
                await proxy.flush()
            loop_name = type(asyncio.get_running_loop()).__module__
        spans = await store.get_spans(attempt.attempt_id)
        contents = [answer.choices[0].message.content, streamed]
        captured = [(s.agent_name, s.attributes["choices"][0]["message"]["content"]) for s in spans]
        return contents, captured, loop_name

    contents, recorded, loop_name = _on_uvloop(main())
    assert loop_name.startswith("uvloop")
    assert contents == ["Paris", "Rome"]
    assert recorded == [("planner", "Paris"), ("planner", "Rome")]


def test_the_backend_time_limit_holds_on_uvloop() -> None:
    async def main() -> str:
        async with FakeLLM(handler=lambda request: text("late", delay_s=2.0)) as llm:
            backend = RemoteBackend(llm.base_url, timeout_s=0.2)
            try:
                await backend.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}]))
            except BackendError as exc:
                return str(exc)
            finally:
                await backend.close()
        return "answered"

    started = time.monotonic()
    message = _on_uvloop(main())
    assert "did not answer within 0.2 s" in message
    assert time.monotonic() - started < 3.0  # the limit, not the model's 2 s answer
