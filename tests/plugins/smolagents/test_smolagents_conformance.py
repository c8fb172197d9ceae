"""The shared adapter conformance suite, run on smolagents' own multi-agent example (a ``CodeAgent`` manager and
its managed ``ToolCallingAgent``, ``search_agent``; model and web tools stood in, see fixtures/README.md)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import multiagent_script
from smolagents import local_python_executor
from smolagents.agents import MultiStepAgent
from smolagents.tools import Tool

from tether.capture import context, redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply
from tether_smolagents import summarize


class TestManagedAgents(AdapterConformance):
    adapter_name = "smolagents"
    expected_agents: ClassVar[set[str]] = multiagent_script.AGENTS
    tool_name = "web_search"
    framework_module = "smolagents"

    def make_agent(self) -> Any:
        return multiagent_script.example.manager_agent

    def reply(self, request: dict[str, Any]) -> Reply:
        return multiagent_script.reply(request)

    def custom_run(self) -> Any:
        async def run(agent: Any, task: dict[str, Any]) -> Any:
            return summarize(await asyncio.to_thread(agent.run, task["task"]))

        return run

    def make_task(self, i: int) -> Any:
        return multiagent_script.question(i)

    def instrumentation_state(self) -> Any:
        return (
            MultiStepAgent.__dict__["run"],
            MultiStepAgent.__dict__["__call__"],
            Tool.__dict__["__call__"],
            local_python_executor.timeout,
            tuple(context._agent_resolvers),
            redirect.install_count(),
        )
