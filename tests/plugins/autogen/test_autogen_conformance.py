"""The shared adapter conformance suite, run on an AutoGen calculator agent and on a two-agent team."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import autogen_calc_agent
import autogen_calc_team
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_core import EVENT_LOGGER_NAME, CancellationToken
from autogen_script import reply, task

from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply

# the fake LLM answers with its own model name; AutoGen warns that it differs from the one it asked for
pytestmark = pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning")


class _AutoGenConformance(AdapterConformance):
    adapter_name = "autogen"
    tool_name = "calculator"
    framework_module = "autogen_agentchat"

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return task(i)

    def instrumentation_state(self) -> Any:
        logger = logging.getLogger(EVENT_LOGGER_NAME)
        return (
            AssistantAgent.__dict__["on_messages_stream"],
            tuple(logger.handlers),
            logger.level,
            logger.propagate,
        )


class TestCalculatorAgent(_AutoGenConformance):
    expected_agents: ClassVar[set[str]] = {"calculator_agent"}

    def make_agent(self) -> Any:
        return autogen_calc_agent.calculator_agent

    def custom_run(self) -> Any:
        async def run(agent: Any, task: str) -> Any:
            await agent.on_reset(CancellationToken())
            return await agent.run(task=task)

        return run


class TestTwoAgentTeam(_AutoGenConformance):
    expected_agents: ClassVar[set[str]] = {"solver", "checker"}

    def make_agent(self) -> Any:
        return autogen_calc_team.team

    def custom_run(self) -> Any:
        async def run(team: Any, task: str) -> Any:  # as Agent Lightning's AutoGen examples do
            await team.reset()
            return await team.run(task=task)

        return run
