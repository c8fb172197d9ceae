"""The shared adapter conformance suite, run on the example two-agent crew (a researcher with a tool and a
writer)."""

from __future__ import annotations

from typing import Any, ClassVar

import agent as example
from crewai import Agent
from crewai.events import crewai_event_bus
from crewai_script import reply, task

from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply

TOPICS = ("Paris", "Mars", "Python", "Everest", "Nile")


class TestResearchCrew(AdapterConformance):
    adapter_name = "crewai"
    expected_agents: ClassVar[set[str]] = {"researcher", "writer"}
    tool_name = "lookup"
    framework_module = "crewai"

    def make_agent(self) -> Any:
        return example.crew

    def reply(self, request: dict[str, Any]) -> Reply:
        return reply(request)

    def make_task(self, i: int) -> Any:
        return task(TOPICS[i % len(TOPICS)])

    def custom_run(self) -> Any:
        return lambda crew, task: crew.kickoff(inputs=task)

    def instrumentation_state(self) -> Any:
        return (
            Agent.__dict__["execute_task"],
            Agent.__dict__["aexecute_task"],
            {k: frozenset(v) for k, v in crewai_event_bus._sync_handlers.items()},
            {k: frozenset(v) for k, v in crewai_event_bus._async_handlers.items()},
        )
