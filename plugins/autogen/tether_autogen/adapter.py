"""The AutoGen adapter: runs AutoGen agents and teams on tasks and captures their model and tool calls.

``AutoGenAdapter.run(agent, task, resources)`` runs a fresh copy of the agent or team (``rollout_copy``, see
``tether_autogen.isolate``) with ``await copy.run(task=<text>)``; a ``run=`` function given to ``tether.wrap``
gets such a copy too, so ``await team.reset(); return await team.run(task=...)`` is safe in concurrent
rollouts. The task text is ``tether.plugin.tasks.task_text``'s: the task itself when it is a string; for a dict,
the first string among its ``"task"``, ``"question"``, ``"input"`` and ``"prompt"`` keys, else the dict as JSON;
anything else, its ``str()``.

It returns an ``AutoGenOutput``: a ``tether.plugin.tasks.RunOutput`` (a ``dict``, so the store keeps it as JSON)
with

- ``"text"`` — the text of the last chat message (the agent's or team's answer),
- ``"messages"`` — every message and event of the run as ``{"source", "type", "content"}``,
- ``"stop_reason"`` — why the run stopped (teams' termination conditions),

and the raw AutoGen ``TaskResult`` as its ``.task_result`` attribute. A reward function receives it as
``output``: ``reward=lambda task, output: float(output["text"].strip() == str(task["answer"]))``.
(``str(output)`` is also the final text.)

Model calls reach tether's proxy through tether's endpoint redirect (AutoGen's OpenAI model
client is an ``openai`` SDK client); capture is in ``tether_autogen.capture``. A ``SelectorGroupChat``'s
speaker-selection calls are named ``"<team name>.selector"`` (``tether_autogen.teams``).
"""

from __future__ import annotations

import logging
from typing import Any

from tether.plugin.adapters import Adapter, SpanSink
from tether.plugin.adapters import json_safe as plain
from tether.plugin.instrument import Patch
from tether.plugin.tasks import RunOutput
from tether.plugin.tasks import task_text as task_text
from tether.types import Resources
from tether_autogen.capture import EventHandler, make_turn_wrapper
from tether_autogen.loop_clients import LoopClients
from tether_autogen.teams import make_factory_wrapper


class AutoGenOutput(RunOutput):
    """What ``AutoGenAdapter.run`` returns: ``{"text", "messages", "stop_reason"}`` plus ``.task_result``."""

    task_result: Any = None


class AutoGenAdapter(Adapter):
    """Runs and captures AutoGen (autogen-agentchat) agents and teams."""

    name = "autogen"
    extra = "autogen"
    agent_types = (
        ("autogen_agentchat.base", "ChatAgent"),
        ("autogen_agentchat.base", "Team"),
        ("autogen_agentchat.agents", "BaseChatAgent"),
        ("autogen_agentchat.teams", "BaseGroupChat"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._handler: EventHandler | None = None
        self._logger_state: tuple[int, bool] | None = None  # the event logger's level and propagate
        self._clients = LoopClients()

    # -- capture ------------------------------------------------------------------------------------------

    def _instrument(self, sink: SpanSink) -> None:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_core import EVENT_LOGGER_NAME

        logger = logging.getLogger(EVENT_LOGGER_NAME)
        self._logger_state = (logger.level, logger.propagate)
        if logger.getEffectiveLevel() > logging.INFO:
            # AutoGen logs its events at INFO. If the user had them off, turn them on for our handler only:
            # stop them from reaching the user's own handlers (restored by uninstrument).
            logger.setLevel(logging.INFO)
            logger.propagate = False
        self._handler = EventHandler(sink)
        logger.addHandler(self._handler)
        from autogen_agentchat.teams import SelectorGroupChat

        self._patch(
            # each agent's turn runs under its name
            Patch(
                AssistantAgent,
                "on_messages_stream",
                lambda original: make_turn_wrapper(original, lambda: self.sink),
            ),
            # the selector's manager factory: its calls are "<team>.selector"'s
            Patch(SelectorGroupChat, "_create_group_chat_manager_factory", make_factory_wrapper),
        )

    def _repoint(self, sink: SpanSink) -> None:
        if self._handler is not None:
            self._handler.sink = sink  # spans go to the latest sink; nothing else changes

    def uninstrument(self) -> None:
        self._clients.close_for_running_loop()  # made by run(), instrumented or not
        super().uninstrument()

    def _uninstrument(self) -> None:
        from autogen_core import EVENT_LOGGER_NAME

        logger = logging.getLogger(EVENT_LOGGER_NAME)
        if self._handler is not None:
            logger.removeHandler(self._handler)
        if self._logger_state is not None:
            level, propagate = self._logger_state
            logger.setLevel(level)
            logger.propagate = propagate
        self._handler = None
        self._logger_state = None

    # -- running ------------------------------------------------------------------------------------------

    def rollout_copy(self, agent: Any) -> Any:
        """A fresh copy of the agent or team (``tether_autogen.isolate``) with this event loop's model clients:
        what ``run`` runs, and what a ``run=`` function gets."""
        from tether_autogen.isolate import fresh_copy

        return fresh_copy(agent, self._clients.model_client)

    async def run(self, agent: Any, task: Any, resources: Resources) -> AutoGenOutput:
        result = await self.rollout_copy(agent).run(task=task_text(task))
        return summarize(result)


def summarize(result: Any) -> AutoGenOutput:
    """An ``AutoGenOutput`` from an AutoGen ``TaskResult``."""
    from autogen_agentchat.messages import BaseChatMessage

    messages = list(getattr(result, "messages", []) or [])
    final = next((m for m in reversed(messages) if isinstance(m, BaseChatMessage)), None)
    output = AutoGenOutput(
        text=final.to_text() if final is not None else "",
        messages=[_message_dict(m) for m in messages],
        stop_reason=getattr(result, "stop_reason", None),
    )
    output.task_result = result
    return output


def _message_dict(message: Any) -> dict[str, Any]:
    content = getattr(message, "content", None)
    if not isinstance(content, str):
        try:
            content = plain(message.model_dump(mode="json").get("content"))
        except Exception:
            content = message.to_text() if hasattr(message, "to_text") else str(content)
    return {"source": getattr(message, "source", None), "type": type(message).__name__, "content": content}
