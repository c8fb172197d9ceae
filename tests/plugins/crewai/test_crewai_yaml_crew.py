"""A YAML-configured crew (crewAI-examples' shape: ``@CrewBase``, roles folded with ``>``) through
``Trainer.dev``: roles ending in a newline reach the proxy and are recorded as written, ``optimize=`` names
them without the newline, and the call converting the last answer to ``output_json`` is named
``"<role>.converter"``."""

from __future__ import annotations

from typing import Any

import pytest
from trip_crew.crew import TripCrew

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.policies import PolicyMap
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.trainer import Trainer
from tether.types import RolloutStatus, SpanKind

ITINERARY = {"name": "Lisbon with music", "days": [{"day": 1, "activities": ["castle", "fado"]}]}


def _model(request: dict[str, Any]) -> Reply:
    """The planner answers in text; the compiler checks opening hours with its tool, then answers in text
    (not JSON), so CrewAI asks the model again to convert the answer to the task's ``output_json``."""
    messages = request["messages"]
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    if tools == ["Itinerary"]:  # CrewAI's converter: the answer, and the output model as a tool
        return tool_call("Itinerary", ITINERARY)
    system = str(messages[0].get("content"))
    if system.startswith("You are Itinerary Compiler"):
        if not any(m.get("role") == "tool" for m in messages):
            return tool_call("opening_hours", {"place": "castle"})
        return text("Day 1: the castle (10:00-18:00), then fado at night.")
    return text("The castle\nA fado house")


def _reward(task: Any, output: Any) -> float:
    crew_output = output.crew_output
    return float(crew_output.json_dict == ITINERARY) if crew_output is not None else 0.0


async def test_folded_roles_and_the_converter_call_are_named_and_optimizable() -> None:
    converter = "Itinerary Compiler.converter"
    agent = tether.wrap(TripCrew().crew(), reward=_reward, optimize=["Activity Planner", converter])
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(agent, [{"destination": "Lisbon", "interests": "music"}])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.reward == 1.0
    names = [t.agent_name for t in rollout.transitions]
    # shown as written: the YAML roles keep their newline
    assert names == ["Activity Planner\n", "Itinerary Compiler\n", "Itinerary Compiler\n", converter], names
    assert [t.trainable for t in rollout.transitions] == [True, False, False, True]
    assert not report.all_problems, report.all_problems  # optimize= named only agents that were captured
    own = [s for s in rollout.spans if s.kind == SpanKind.LLM and s.name == "crewai.llm_call"]
    # (CrewAI emits no LLM call event for the converter's call: its proxy span above is its record)
    assert [s.agent_name for s in own] == names[:3], [s.agent_name for s in own]
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "Itinerary Compiler\n" and tool.attributes[spans.TOOL_NAME] == "opening_hours"
    split = PolicyMap.from_optimize({"planner": ["Activity Planner"], "json": [converter]})
    assert [split.policy_of(n) for n in names] == ["planner", "frozen", "frozen", "json"]
    assert rollout.output["text"].startswith("Day 1")  # the raw answer; the converted one is json_dict


@pytest.mark.parametrize("name", ["Activity Planner", "Activity Planner\n", "  Activity Planner  "])
def test_a_policy_map_names_a_folded_role_either_way(name: str) -> None:
    assert PolicyMap.from_optimize({"p": [name]}).policy_of("Activity Planner\n") == "p"
