"""The shared adapter conformance suite, run on a four-node LangGraph calculator graph."""

from __future__ import annotations

from typing import Any, ClassVar

import langgraph_calc_graph
from langchain_core.tracers import context as tracers_context
from langgraph_script import reply, task

from tether.capture import context, redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply


class TestCalculatorGraph(AdapterConformance):
    adapter_name = "langgraph"
    # model calls come from planner, agent and finish; tool calls from the ToolNode named "tools"
    expected_agents: ClassVar[set[str]] = {"planner", "agent", "tools", "finish"}
    tool_name = "add"
    framework_module = "langgraph"

    def make_agent(self) -> Any:
        return langgraph_calc_graph.graph

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return task(i)

    def custom_run(self) -> Any:
        return lambda graph, task: graph.ainvoke(task)

    def instrumentation_state(self) -> Any:
        return (
            tuple(tracers_context._configure_hooks),
            tuple(context._agent_resolvers),
            redirect.install_count(),
        )
