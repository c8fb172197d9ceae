"""The shared adapter conformance suite on Agent Framework's own agent-as-tool sample (fixtures/agent_as_tool.py:
a coordinator whose ``creative_writer`` tool is a ``WriterAgent`` run through ``as_tool()``, both on
``OpenAIChatClient``, the Responses API)."""

from __future__ import annotations

from typing import Any, ClassVar

import agent_as_tool
from agent_framework._agents import RawAgent
from agent_framework._tools import FunctionTool
from agent_framework._workflows._executor import Executor
from agent_framework_openai._chat_client import RawOpenAIChatClient
from agent_framework_openai._chat_completion_client import RawOpenAIChatCompletionClient
from maf_script import reply

from tether.capture import redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply


class TestAgentAsToolSample(AdapterConformance):
    adapter_name = "agent_framework"
    expected_agents: ClassVar[set[str]] = {"CoordinatorAgent", "WriterAgent"}
    tool_name = "creative_writer"
    framework_module = "agent_framework"

    def make_agent(self) -> Any:
        return agent_as_tool.coordinator

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return f"Create a tagline for coffee shop number {i}"

    def custom_run(self) -> Any:
        async def run(agent: Any, task: str) -> str:
            result = await agent.run(task)
            return str(result.text)

        return run

    def instrumentation_state(self) -> Any:
        return (
            RawAgent.__dict__["run"],
            Executor.__dict__["execute"],
            FunctionTool.__dict__["invoke"],
            RawOpenAIChatClient.__dict__["_get_conversation_id"],
            "client" in vars(RawOpenAIChatClient),
            "client" in vars(RawOpenAIChatCompletionClient),
            redirect.install_count(),
        )
