"""The shared adapter conformance suite, run on LangChain's tool-calling ``AgentExecutor`` and on sub-agents named
by their runnables (an LCEL planner feeding an ``AgentExecutor`` named ``solver``)."""

from __future__ import annotations

from typing import Any, ClassVar

import langchain_agents as agents
from langchain_core.tracers import context as tracers_context
from langchain_script import question, reply

from tether.capture import context, redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply


class _LangChain(AdapterConformance):
    adapter_name = "langchain"
    tool_name = "multiply"
    framework_module = "langchain_core"

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return {"input": question(i + 2)}

    def custom_run(self) -> Any:
        return lambda runnable, task: runnable.ainvoke(task)

    def instrumentation_state(self) -> Any:
        return (tuple(tracers_context._configure_hooks), tuple(context._agent_resolvers), redirect.install_count())


class TestAgentExecutor(_LangChain):
    expected_agents: ClassVar[set[str]] = {"AgentExecutor"}

    def make_agent(self) -> Any:
        return agents.agent_executor


class TestNamedSubAgents(_LangChain):
    expected_agents: ClassVar[set[str]] = {"planner", "solver"}

    def make_agent(self) -> Any:
        return agents.pipeline
