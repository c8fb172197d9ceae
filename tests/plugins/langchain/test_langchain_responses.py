"""LangChain on the Responses API: a ``create_agent`` agent whose ``ChatOpenAI`` has ``use_responses_api=True``
runs unchanged under ``tether.wrap`` + ``Trainer.dev``: tether's proxy serves ``/v1/responses`` as the chat call
it translates to, and the calls, the tool call and the agent's name are captured as on chat completions."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_agents import AGENT_PROMPT, tools
from langchain_openai import ChatOpenAI
from langchain_script import question, reply

import tether
from tether import spans as schema
from tether.models.remote import RemoteBackend
from tether.spans import is_proxy_llm_span
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.types import RolloutStatus, SpanKind

model = ChatOpenAI(
    model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="x", use_responses_api=True, max_retries=0
)
responses_agent = create_agent(model, tools=tools, system_prompt=AGENT_PROMPT, name="calculator")


async def test_a_create_agent_on_the_responses_api_is_captured() -> None:
    async with FakeLLM(handler=reply) as llm:
        wrapped = tether.wrap(responses_agent, reward=lambda task, output: 1.0)
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend, progress=False).adev(wrapped, [question(6, "plus")])
        finally:
            await backend.close()
    (dev,) = report.rollouts
    assert dev.status == RolloutStatus.SUCCEEDED, dev.error
    assert "The result is 13." in str(dev.rollout.output["messages"][-1]["content"])
    assert [t.agent_name for t in dev.transitions] == ["calculator", "calculator"]
    assert all(t.prompt_token_ids and t.response_token_ids for t in dev.transitions)
    assert [s.agent_name for s in dev.spans if is_proxy_llm_span(s)] == ["calculator", "calculator"]
    (tool,) = [s for s in dev.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "calculator" and tool.attributes[schema.TOOL_NAME] == "add"
    assert tool.attributes[schema.TOOL_ARGUMENTS] == {"first_int": 6, "second_int": 7}
    assert not report.all_problems, report.all_problems
