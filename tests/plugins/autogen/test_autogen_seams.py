"""The private AutoGen fields a rollout copy relies on (``tether_autogen.isolate``) are checked where they are
used: a release that renames one fails the copy loudly, naming the installed autogen-agentchat version and
the module to update, instead of letting rollouts share a conversation. Each test removes the seam from a
real AutoGen object or class, as such a release would."""

from __future__ import annotations

import copy
import importlib.metadata
from typing import Any

import autogen_calc_team
import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import BaseGroupChat, RoundRobinGroupChat

from tether.capture.patching import SeamMissing
from tether_autogen import AutoGenAdapter
from tether_autogen.isolate import fresh_copy

VERSION = importlib.metadata.version("autogen-agentchat")


def _agent(name: str) -> AssistantAgent:
    return AssistantAgent(name, model_client=autogen_calc_team.client, system_message="be brief")


def _team() -> RoundRobinGroupChat:
    return RoundRobinGroupChat([_agent("a"), _agent("b")], termination_condition=MaxMessageTermination(2))


def test_the_seams_are_where_the_copies_expect_them() -> None:
    team = _team()
    clone = fresh_copy(team)
    assert clone is not team and clone._participants[0] is not team._participants[0]
    assert clone._participants[0]._model_context is not team._participants[0]._model_context


def test_a_team_field_that_moved_fails_loudly() -> None:
    team = _team()
    del team._max_turns  # a release that stores max_turns elsewhere
    moved = rf"autogen-agentchat {VERSION}: .*has no _max_turns.*tether_autogen\.isolate"
    with pytest.raises(SeamMissing, match=moved):
        fresh_copy(team)
    with pytest.raises(SeamMissing, match="pin autogen-agentchat"):
        AutoGenAdapter().rollout_copy(team)  # what run() and a run= get: the same error, not a CannotCopy


def test_a_changed_team_constructor_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    original = BaseGroupChat.__init__

    def without_emit_team_events(  # a release that dropped a parameter the copy passes
        self: Any,
        name: str,
        description: str,
        participants: Any,
        group_chat_manager_name: str,
        group_chat_manager_class: Any,
        termination_condition: Any = None,
        max_turns: Any = None,
        runtime: Any = None,
        custom_message_types: Any = None,
    ) -> None:
        original(
            self,
            name,
            description,
            participants,
            group_chat_manager_name,
            group_chat_manager_class,
            termination_condition,
            max_turns,
            runtime,
            custom_message_types,
        )

    team = _team()
    monkeypatch.setattr(BaseGroupChat, "__init__", without_emit_team_events)
    with pytest.raises(SeamMissing, match=rf"autogen-agentchat {VERSION}: .*takes no emit_team_events"):
        fresh_copy(team)


def test_an_agent_whose_model_context_moved_fails_loudly() -> None:
    agent = copy.copy(_agent("solo"))
    del agent._model_context  # a release that renamed it: a copy would share the conversation
    with pytest.raises(SeamMissing, match=rf"autogen-agentchat {VERSION}: .*has no _model_context"):
        fresh_copy(agent)
