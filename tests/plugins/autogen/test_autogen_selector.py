"""A ``SelectorGroupChat`` (AutoGen's guide's shape) through ``Trainer.dev``: the speaker-selection calls the
team's manager makes are named ``"<team name>.selector"``, so ``optimize=`` and policy maps can name them
like any participant."""

from __future__ import annotations

from typing import Any

import autogen_selector_team
import pytest

import tether
from tether.models.remote import RemoteBackend
from tether.policies import PolicyMap
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.trainer import Trainer
from tether.types import RolloutStatus

pytestmark = pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning")

TASK = "Who was the Miami Heat player with the highest points in the 2006-2007 season, and what was the "
TASK += "percentage change in his total rebounds between the 2007-2008 and 2008-2009 seasons?"


def _all_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


def _model(request: dict[str, Any]) -> Reply:
    """The scripted model: the selector picks planner, searcher, analyst, planner; each does its part."""
    messages = request["messages"]
    seen = _all_text(messages)
    if "Choose the agent that performs the next task" in seen:
        if "85.98" in seen:
            return text("PlanningAgent")
        if "398 total rebounds" in seen:
            return text("DataAnalystAgent")
        if "1. WebSearchAgent" in seen:
            return text("WebSearchAgent")
        return text("PlanningAgent")
    system = str(messages[0].get("content"))
    if system.startswith("You are a planning agent"):
        if "85.98" in seen:
            return text("Wade's rebounds rose by 85.98%. TERMINATE")
        return text("1. WebSearchAgent : find the rebounds\n2. DataAnalystAgent : compute the change")
    if system.startswith("You are a web search agent"):
        return tool_call("search_web_tool", {"query": "Dwyane Wade rebounds 2007-2008"})
    if system.startswith("You are a data analyst"):
        return tool_call("percentage_change_tool", {"start": 214, "end": 398})
    return text("?")


async def test_selector_calls_are_named_after_the_team_and_can_be_optimized() -> None:
    selector = "SelectorGroupChat.selector"
    agent = tether.wrap(
        autogen_selector_team.team, reward=lambda task, out: float("85.98" in out["text"]), optimize=[selector]
    )
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(agent, [TASK])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.reward == 1.0
    names = [t.agent_name for t in rollout.transitions]
    assert names == [
        selector,
        "PlanningAgent",
        selector,
        "WebSearchAgent",
        selector,
        "DataAnalystAgent",
        selector,
        "PlanningAgent",
    ], names
    assert [t.trainable for t in rollout.transitions] == [n == selector for n in names]
    assert not report.all_problems, report.all_problems
    # a policy map trains the selector apart from the participants, which the frozen model serves
    split = PolicyMap.from_optimize({"router": [selector]})
    assert [split.policy_of(n) for n in names] == ["router" if n == selector else "frozen" for n in names]


async def test_a_named_team_names_its_selector_and_the_user_team_is_unchanged() -> None:
    from autogen_agentchat.teams import SelectorGroupChat

    team = SelectorGroupChat(
        [autogen_selector_team.planning_agent, autogen_selector_team.web_search_agent],
        model_client=autogen_selector_team.model_client,
        termination_condition=autogen_selector_team.team._termination_condition,
        selector_prompt=autogen_selector_team.selector_prompt,
        name="research_team",
    )
    factory = SelectorGroupChat.__dict__["_create_group_chat_manager_factory"]
    async with FakeLLM(handler=_model) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(tether.wrap(team), [TASK])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.transitions and rollout.transitions[0].agent_name == "research_team.selector"
    assert SelectorGroupChat.__dict__["_create_group_chat_manager_factory"] is factory  # unpatched after
