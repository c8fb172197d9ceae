"""The shared adapter conformance suite, run on two named PydanticAI agents (``boss`` delegates to
``calculator`` from a tool) on ``OpenAIChatModel``."""

from __future__ import annotations

from typing import Any, ClassVar

import calc_agents
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.tool_manager import ToolManager

from tether.capture import context, redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply
from tether_pydantic_ai import summarize


class TestDelegatingAgents(AdapterConformance):
    adapter_name = "pydantic_ai"
    expected_agents: ClassVar[set[str]] = {"boss", "calculator"}
    tool_name = "add"
    framework_module = "pydantic_ai"

    def make_agent(self) -> Any:
        return calc_agents.boss

    def reply(self, request: dict[str, Any]) -> Reply:
        return calc_agents.reply(request)

    def custom_run(self) -> Any:
        async def run(agent: Any, task: dict[str, Any]) -> Any:
            return summarize(await agent.run(task["question"]))

        return run

    def make_task(self, i: int) -> Any:
        return {"question": calc_agents.question(i)["question"]}

    def instrumentation_state(self) -> Any:
        return (
            ToolManager.__dict__["_execute_tool_call_impl"],
            AbstractAgent.__dict__["_infer_name"],
            tuple(context._agent_resolvers),
            redirect.install_count(),
        )
