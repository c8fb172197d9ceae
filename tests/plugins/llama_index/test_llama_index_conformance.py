"""The shared adapter conformance suite on LlamaIndex's own multi-agent example (fixtures/agent_workflow_multi.py:
an ``AgentWorkflow`` whose ResearchAgent hands off to a WriteAgent, which hands off to a ReviewAgent; every
``FunctionAgent`` streams its model calls)."""

from __future__ import annotations

from typing import Any, ClassVar

import agent_workflow_multi
from li_script import reply
from llama_index.core.agent.workflow import AgentWorkflow, CodeActAgent, FunctionAgent, ReActAgent
from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent
from llama_index.llms.openai import OpenAI

from tether.capture import redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply


class TestAgentWorkflowExample(AdapterConformance):
    adapter_name = "llama_index"
    expected_agents: ClassVar[set[str]] = {"ResearchAgent", "WriteAgent", "ReviewAgent"}
    tool_name = "record_notes"
    framework_module = "llama_index.core"

    def make_agent(self) -> Any:
        return agent_workflow_multi.agent_workflow

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return f"Write me a report on the history of bridge number {i}."

    def custom_run(self) -> Any:
        async def run(agent: Any, task: str) -> str:
            handler = agent.run(user_msg=task)
            return str(await handler)

        return run

    def instrumentation_state(self) -> Any:
        return (
            *(vars(cls)["take_step"] for cls in (FunctionAgent, ReActAgent, CodeActAgent)),
            vars(AgentWorkflow)["_call_tool"],
            vars(BaseWorkflowAgent)["_call_tool"],
            vars(OpenAI)["_get_aclient"],
            redirect.install_count(),
        )
