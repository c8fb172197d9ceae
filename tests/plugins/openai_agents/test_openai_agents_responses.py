"""An Agents SDK agent on the Responses API (its model an ``OpenAIResponsesModel``, the SDK's default API) runs
unchanged under ``tether.wrap`` + ``Trainer.dev``: its requests reach tether's proxy at ``/v1/responses``, which
answers them as the chat calls they translate to (the fake LLM serves chat completions only), and each call is
captured with the agent's name and token ids, its tool call with arguments and result."""

from __future__ import annotations

from typing import Any

from agents import Agent, OpenAIResponsesModel, function_tool
from openai import AsyncOpenAI

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.types import RolloutStatus, SpanKind

client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)  # the user's, built first


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


adder = Agent(
    name="adder",
    instructions="Add the numbers with the add tool, then state the sum.",
    tools=[add],
    model=OpenAIResponsesModel(model="gpt-x", openai_client=client),
)


def _model(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    assert messages[0] == {"role": "system", "content": "Add the numbers with the add tool, then state the sum."}
    results = [m for m in messages if m.get("role") == "tool"]
    if results:
        return text(f"The sum is {results[-1]['content']}.")
    return tool_call("add", {"a": 2, "b": 40})


async def test_an_agent_on_the_responses_api_runs_under_wrap() -> None:
    agent = tether.wrap(adder, reward=lambda task, out: float("42" in str(out)))
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True, logprobs=True)
        try:
            report = await tether.Trainer(model=backend).adev(agent, ["What is 2 + 40?"])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.output == "The sum is 42." and rollout.reward == 1.0
    assert [r.path for r in llm.requests] == ["/v1/chat/completions"] * 2
    first, second = rollout.transitions
    assert first.agent_name == second.agent_name == "adder"
    assert first.prompt_token_ids and first.response_token_ids and second.prompt_token_ids
    assert first.response["tool_calls"][0]["function"]["name"] == "add"
    assert second.messages[-1]["role"] == "tool" and second.messages[-1]["content"] == "42"
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "adder" and tool.attributes[spans.TOOL_NAME] == "add"
    assert not report.all_problems
