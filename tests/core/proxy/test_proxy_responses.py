"""The Responses API through the proxy: the real openai SDK's ``client.responses`` → ProxyServer → RemoteBackend →
FakeLLM (which serves chat completions only: the proxy translates), recorded as the same chat-shaped spans, and a
plain openai-SDK agent on the Responses API under ``tether.wrap`` + ``Trainer.dev``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

import tether
from tether import spans
from tether.capture.context import AGENT_HEADER, CALL_ID_HEADER
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.proxy import ProxyServer
from tether.store.memory import MemoryStore
from tether.testing.fake_llm import FakeLLM, text, tool_call, tool_calls
from tether.types import Attempt, RolloutSpec, RolloutStatus, Span, SpanKind

WEATHER = {
    "type": "function",
    "name": "weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@dataclass
class Rig:
    store: MemoryStore
    llm: FakeLLM
    proxy: ProxyServer
    attempt: Attempt
    client: openai.AsyncOpenAI

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
            client = openai.AsyncOpenAI(
                base_url=url, api_key="k", max_retries=0, default_headers={AGENT_HEADER: "planner"}
            )
            yield Rig(store, llm, proxy, attempt, client)
            await client.close()


async def test_create_with_a_function_tool_is_the_chat_call_it_translates_to(rig: Rig) -> None:
    rig.llm.add(tool_call("weather", {"city": "Paris"}, id="call_w1"))
    out = await rig.client.responses.create(
        model="gpt-x",
        instructions="You answer weather questions.",
        input="Weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        max_output_tokens=50,
        temperature=0.3,
        extra_headers={CALL_ID_HEADER: "call-r1"},
    )
    assert out.object == "response" and out.status == "completed"
    (item,) = out.output
    assert item.type == "function_call" and item.name == "weather" and item.call_id == "call_w1"
    assert json.loads(item.arguments) == {"city": "Paris"}
    assert out.usage is not None and out.usage.output_tokens > 0 and out.usage.input_tokens > 0
    assert out.instructions == "You answer weather questions." and out.tools[0].name == "weather"  # type: ignore[union-attr]

    (sent,) = rig.llm.chat_requests
    assert sent["messages"] == [
        {"role": "system", "content": "You answer weather questions."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert sent["tools"][0]["function"]["name"] == "weather" and sent["max_tokens"] == 50
    assert sent["temperature"] == 0.3

    (span,) = await rig.spans()
    assert span.kind == SpanKind.LLM and span.name == spans.LLM_CALL and span.agent_name == "planner"
    assert span.attributes["call_id"] == "call-r1"
    assert span.attributes["request"]["messages"] == sent["messages"]
    assert span.attributes["request"]["tools"] == sent["tools"]
    assert span.attributes["prompt_token_ids"], "the prompt's token ids are recorded"
    (choice,) = span.attributes["choices"]
    assert choice["response_token_ids"] and choice["message"]["tool_calls"][0]["function"]["name"] == "weather"


async def test_multi_turn_input_items_become_chat_messages(rig: Rig) -> None:
    rig.llm.add(text("Sunny, 21 C in Paris; rainy in Oslo."))
    history: list[Any] = [
        {"role": "developer", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather in Paris "},
                {"type": "input_text", "text": "and Oslo?"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny, 21 C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
    ]
    out = await rig.client.responses.create(model="gpt-x", input=history, tools=[WEATHER])  # type: ignore[list-item]
    assert out.output_text == "Sunny, 21 C in Paris; rainy in Oslo."
    (sent,) = rig.llm.chat_requests
    assert sent["messages"] == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    # the next turn sends the answer back as an assistant output message: it becomes an assistant message
    rig.llm.add(text("You're welcome."))
    more = [
        *history,
        *(item.model_dump(exclude_none=True) for item in out.output),
        {"role": "user", "content": "thanks"},
    ]
    again = await rig.client.responses.create(model="gpt-x", input=more)
    assert again.output_text == "You're welcome."
    assert rig.llm.chat_requests[1]["messages"][-2:] == [
        {"role": "assistant", "content": "Sunny, 21 C in Paris; rainy in Oslo."},
        {"role": "user", "content": "thanks"},
    ]
    assert len(await rig.spans()) == 2


async def test_stream_helper_and_raw_events(rig: Rig) -> None:
    words = "The weather in Paris is sunny and warm today, 21 degrees."
    rig.llm.add(text(words))
    async with rig.client.responses.stream(model="gpt-x", input="Paris?") as stream:
        deltas = [event.delta async for event in stream if event.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == words and len(deltas) > 1
    assert final.output_text == words and final.status == "completed"
    rig.llm.add(tool_call("weather", {"city": "Oslo"}, id="call_s"))
    async with rig.client.responses.stream(model="gpt-x", input="Oslo?", tools=[WEATHER]) as stream:  # type: ignore[list-item]
        final = await stream.get_final_response()
    (call,) = final.output
    assert (
        call.type == "function_call"
        and call.call_id == "call_s"
        and json.loads(call.arguments) == {"city": "Oslo"}
    )

    rig.llm.add(tool_calls(("weather", {"city": "Paris"}), ("weather", {"city": "Rome"}), content="Checking."))
    events = await rig.client.responses.create(
        model="gpt-x", input="Paris and Rome?", tools=[WEATHER], stream=True
    )  # type: ignore[list-item]
    seen = [event async for event in events]
    kinds = [event.type for event in seen]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    arguments = "".join(e.delta for e in seen if e.type == "response.function_call_arguments.delta")
    assert arguments == '{"city":"Paris"}{"city":"Rome"}'
    done = seen[-1].response  # type: ignore[union-attr]
    assert [o.type for o in done.output] == ["message", "function_call", "function_call"]
    assert done.output_text == "Checking."
    assert [json.loads(o.arguments)["city"] for o in done.output[1:]] == ["Paris", "Rome"]  # type: ignore[union-attr]
    recorded = await rig.spans()
    assert [s.attributes["request"]["params"]["stream"] for s in recorded] == [True, True, True]


async def test_what_needs_stored_responses_is_refused_with_the_fix(rig: Rig) -> None:
    with pytest.raises(openai.BadRequestError, match=r"previous_response_id.*does not store responses.*input"):
        await rig.client.responses.create(model="gpt-x", input="hi", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="only function tools are served"):
        await rig.client.responses.create(model="gpt-x", input="hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.BadRequestError, match="item_reference needs stored responses"):
        await rig.client.responses.create(model="gpt-x", input=[{"type": "item_reference", "id": "msg_1"}])
    assert rig.llm.chat_requests == [] and await rig.spans() == []


# -- a plain openai-SDK agent written for the Responses API, under tether.wrap + Trainer.dev -------------------

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)  # built before tether


def weather(city: str) -> str:
    return {"Paris": "sunny"}.get(city, "rain")


def forecaster(question: str) -> str:
    """Ask, run the tools the model calls, send their outputs back as function_call_output items."""
    items: list[Any] = [{"role": "user", "content": question}]
    for _ in range(4):
        reply = client.responses.create(model="gpt-x", instructions="Use weather.", input=items, tools=[WEATHER])  # type: ignore[list-item]
        calls = [o for o in reply.output if o.type == "function_call"]
        if not calls:
            return reply.output_text
        items += [o.model_dump(exclude_none=True) for o in reply.output]
        for call in calls:
            output = weather(**json.loads(call.arguments))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    return "no answer"


def _model(request: dict[str, Any]) -> Any:
    if request["messages"][-1]["role"] == "tool":
        return text(f"It is {request['messages'][-1]['content']}.")
    return tool_call("weather", {"city": "Paris"})


async def test_a_responses_api_agent_runs_under_wrap_with_names_token_ids_and_tools() -> None:
    agent = tether.wrap(forecaster, reward=lambda task, out: float(out == "It is sunny."))
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True, logprobs=True)  # as vLLM answers
        try:
            report = await tether.Trainer(model=backend).adev(agent, ["Weather in Paris?"])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED and rollout.output == "It is sunny." and rollout.reward == 1.0
    assert report.agent_names == {"forecaster"}
    first, second = rollout.transitions
    assert first.agent_name == second.agent_name == "forecaster"
    assert first.prompt_token_ids and first.response_token_ids and second.prompt_token_ids
    assert first.response["tool_calls"][0]["function"]["name"] == "weather"
    call_id = first.response["tool_calls"][0]["id"]
    assert second.messages[-1] == {"role": "tool", "tool_call_id": call_id, "content": "sunny"}
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "forecaster" and tool.attributes[spans.TOOL_NAME] == "weather"
    assert (
        tool.attributes[spans.TOOL_ARGUMENTS] == {"city": "Paris"}
        and tool.attributes[spans.TOOL_RESULT] == "sunny"
    )
    assert not report.all_problems
