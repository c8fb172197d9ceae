"""The shared adapter conformance suite, run on the example triage agent (a handoff to one of two
specialists, each with a tool)."""

from __future__ import annotations

from typing import Any, ClassVar

from agents import Runner
from agents.models import _openai_shared
from agents.tracing import get_trace_provider
from triage_script import example, math_task, reply

from tether.capture import context, redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply
from tether_openai_agents import gate, rollout_run_config


class TestTriageAgent(AdapterConformance):
    adapter_name = "openai_agents"
    expected_agents: ClassVar[set[str]] = {"triage_agent", "math_agent", "words_agent"}
    tool_name = "add"
    framework_module = "agents"

    def make_agent(self) -> Any:
        return example.triage_agent

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def custom_run(self) -> Any:
        async def run(agent: Any, task: dict[str, str], resources: Any) -> Any:
            result = await Runner.run(agent, input=task["question"], run_config=rollout_run_config(resources))
            return result.final_output

        return run

    def make_task(self, i: int) -> Any:
        return {"question": math_task(i)["question"]}  # the conformance suite finds the whole task in the prompt

    def instrumentation_state(self) -> Any:
        provider = get_trace_provider()
        return (
            gate.processors(provider),
            gate.tracing_enabled(provider),
            gate.hold_count(),
            tuple(context._agent_resolvers),
            redirect.install_count(),
            _openai_shared.get_use_responses_by_default(),
        )
