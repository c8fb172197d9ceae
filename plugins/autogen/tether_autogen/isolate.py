"""Per-rollout copies of AutoGen agents and teams.

AutoGen objects carry run state: an ``AssistantAgent`` keeps the conversation in its model context, a team
keeps its runtime, its message thread and its termination condition's counters, and refuses to run twice
at once. Rollouts must be independent (and may run concurrently), so the adapter runs each one on a fresh
copy and never runs or changes the user's object:

- an agent: a shallow copy (same model client, tools, memory and settings) with a fresh model context
  built from the original's configuration (its initial messages, not its history);
- a team (``BaseGroupChat``: round-robin, selector, swarm, …): a shallow copy, keeping the subclass's
  settings, on which the base class is initialised again with copied participants and a deep-copied
  termination condition — a new team id, runtime, output queue and run flags.

Objects this cannot copy are rejected with an error that names ``run=`` as the way to build one per task (a
``run=`` is then handed the user's object, and builds its own).

The copies read and re-initialise private fields of AutoGen's classes (``BaseGroupChat``'s constructor
arguments as it stores them, ``AssistantAgent._model_context`` and ``_model_client``). A release that renames
one would otherwise make rollouts share run state silently, so each copy first checks them (``_SEAM``, a
``tether.capture.patching.Seam``) and fails with ``SeamMissing`` naming the installed autogen-agentchat version.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tether.capture.patching import Seam
from tether.plugin.adapters import CannotCopy

ClientMap = Callable[[Any], Any]

_SEAM = Seam("autogen-agentchat", "tether_autogen.isolate")
#: what ``_team_copy`` reads from a team, as ``BaseGroupChat.__init__`` stores its arguments
TEAM_FIELDS = (
    "_name",
    "_description",
    "_participants",
    "_group_chat_manager_name",
    "_base_group_chat_manager_class",
    "_termination_condition",
    "_max_turns",
    "_embedded_runtime",
    "_runtime",
    "_emit_team_events",
    "_message_factory",
)
#: the ``BaseGroupChat.__init__`` parameters ``_team_copy`` passes
TEAM_PARAMETERS = (
    "name",
    "description",
    "participants",
    "group_chat_manager_name",
    "group_chat_manager_class",
    "termination_condition",
    "max_turns",
    "runtime",
    "emit_team_events",
)
#: what ``_agent_copy`` and ``_with_clients`` replace in an ``AssistantAgent``
AGENT_FIELDS = ("_model_context", "_model_client")


def _same(client: Any) -> Any:
    return client


class CannotIsolate(CannotCopy):
    """An AutoGen object the adapter cannot copy for a rollout."""


def fresh_copy(obj: Any, clients: ClientMap = _same) -> Any:
    """A copy of an AutoGen agent or team that shares no run state with ``obj``; ``clients`` maps each model
    client the copy uses to the one it should use instead (see ``tether_autogen.loop_clients``)."""
    from autogen_agentchat.base import ChatAgent, Team
    from autogen_agentchat.teams import BaseGroupChat

    if isinstance(obj, BaseGroupChat):
        return _with_clients(_team_copy(obj, clients), clients)
    if isinstance(obj, ChatAgent):
        return _with_clients(_agent_copy(obj), clients)
    kind = "team" if isinstance(obj, Team) else "object"
    raise CannotIsolate(
        f"tether cannot copy the AutoGen {kind} {type(obj).__qualname__} for each rollout; pass "
        "run=lambda agent, task: build_my_team().run(task=...) to tether.wrap to build a fresh one per task"
    )


def _with_clients(clone: Any, clients: ClientMap) -> Any:
    """Point the copy's model client (an agent's, or a selector team's) at its replacement."""
    model_client = getattr(clone, "_model_client", None)
    if model_client is not None:
        clone._model_client = clients(model_client)
    return clone


def _agent_copy(agent: Any) -> Any:
    from autogen_agentchat.agents import AssistantAgent

    if isinstance(agent, AssistantAgent):  # a user's own ChatAgent may hold neither
        _SEAM.require(agent, *AGENT_FIELDS)
    clone = copy.copy(agent)
    context = getattr(agent, "_model_context", None)
    if context is not None:
        clone._model_context = _fresh_context(context)
    return clone


def _fresh_context(context: Any) -> Any:
    """A model context like ``context`` but empty of history: rebuilt from its component configuration when
    it has one, else a deep copy (which keeps whatever history it holds)."""
    try:
        return type(context).load_component(context.dump_component())
    except Exception:
        return copy.deepcopy(context)


def _team_copy(team: Any, clients: ClientMap) -> Any:
    from autogen_agentchat.teams import BaseGroupChat

    _SEAM.require(team, *TEAM_FIELDS)
    _SEAM.require_parameters(BaseGroupChat.__init__, *TEAM_PARAMETERS)
    clone = copy.copy(team)
    BaseGroupChat.__init__(
        clone,
        name=team._name,
        description=team._description,
        participants=[fresh_copy(p, clients) for p in team._participants],
        group_chat_manager_name=team._group_chat_manager_name,
        group_chat_manager_class=team._base_group_chat_manager_class,
        termination_condition=copy.deepcopy(team._termination_condition),
        max_turns=team._max_turns,
        runtime=None if team._embedded_runtime else team._runtime,
        emit_team_events=team._emit_team_events,
    )
    clone._message_factory = team._message_factory  # keeps the custom message types the user registered
    return clone
