"""The adapter for Microsoft Agent Framework agents (``Agent``, any ``BaseAgent``) and workflows (``Workflow``:
``SequentialBuilder``, ``HandoffBuilder``, ``WorkflowBuilder``, ... ``.build()``).

``run(agent, task, resources)`` is ``await agent.run(<task text>)`` (the text is
``tether.plugin.tasks.task_text``'s) and returns a ``RunOutput``: ``{"text": <the answer>, "messages": [{"author",
"role", "text"}, ...]}`` with the framework's own result as ``.result`` (an ``AgentResponse``, or a workflow's
``WorkflowRunResult``; for a workflow the text is that of its last output). Model calls reach tether's proxy
through tether's endpoint redirect (Agent Framework's OpenAI clients are ``openai.AsyncOpenAI`` clients), on the
Responses API (``OpenAIChatClient``) or Chat Completions (``OpenAIChatCompletionClient``) as the agent was built;
each client's ``AsyncOpenAI`` is used through a per-event-loop copy inside rollouts
(``tether_agent_framework.loop_clients``). Naming and tool capture: ``tether_agent_framework.capture``.

A ``Workflow`` refuses a second run while one is active, so each rollout runs a copy
(``rollout_copy``: a deep copy of its executors, edges and runner state that shares the agents and chat
clients, which hold no run state); an agent runs as it is (a run without a session is stateless).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tether.plugin.adapters import Adapter, CannotCopy, SpanSink, instance_of, loaded_classes
from tether.plugin.instrument import Patch
from tether.plugin.tasks import RunOutput, task_text
from tether.types import Resources
from tether_agent_framework import stateless
from tether_agent_framework.capture import make_execute_wrapper, make_invoke_wrapper, make_run_wrapper
from tether_agent_framework.loop_clients import LoopClients

#: (module, class) of the workflows the adapter runs (a rollout runs a copy)
_WORKFLOW_TYPES = (("agent_framework._workflows._workflow", "Workflow"),)
#: what a workflow's copy shares with the original (no run state; clients hold HTTP pools)
_SHARED_TYPES = (("agent_framework._agents", "BaseAgent"), ("agent_framework._clients", "BaseChatClient"))


class AgentFrameworkOutput(RunOutput):
    """What ``AgentFrameworkAdapter.run`` returns: ``{"text", "messages"}`` plus ``.result``."""

    result: Any = None


class AgentFrameworkAdapter(Adapter):
    """Runs and captures Microsoft Agent Framework agents and workflows."""

    name = "agent_framework"
    extra = "agent-framework"
    agent_types = (("agent_framework._agents", "BaseAgent"), *_WORKFLOW_TYPES)

    def __init__(self) -> None:
        super().__init__()
        self._clients = LoopClients()

    # -- capture ------------------------------------------------------------------------------------------

    def _instrument(self, sink: SpanSink) -> None:
        from agent_framework._agents import RawAgent
        from agent_framework._tools import FunctionTool
        from agent_framework._workflows._executor import Executor

        responses_client = stateless.responses_client_class()  # checked before anything is patched
        self._patch(
            Patch(RawAgent, "run", make_run_wrapper),
            Patch(Executor, "execute", make_execute_wrapper),
            Patch(FunctionTool, "invoke", lambda original: make_invoke_wrapper(original, lambda: self.sink)),
        )
        if responses_client is not None:
            self._patch(Patch(responses_client, stateless.METHOD, stateless.make_wrapper))
        self._clients.install()

    def uninstrument(self) -> None:
        self._clients.close_for_running_loop()  # made in run()'s loop, instrumented or not
        super().uninstrument()

    def _uninstrument(self) -> None:
        self._clients.uninstall()

    # -- running ------------------------------------------------------------------------------------------

    def rollout_copy(self, agent: Any) -> Any:
        """A workflow's copy for one rollout (see the module docstring); an agent itself."""
        if not instance_of(agent, _WORKFLOW_TYPES):
            return agent
        with _shared(loaded_classes(_SHARED_TYPES)):
            try:
                return copy.deepcopy(agent)
            except Exception as exc:
                raise CannotCopy(
                    f"cannot copy the workflow for a rollout ({type(exc).__name__}: {exc}); a Workflow runs one "
                    "run at a time: pass run= to tether.wrap that builds the workflow per task, e.g. "
                    "run=lambda _, task: SequentialBuilder(participants=[...]).build().run(task)"
                ) from exc

    async def run(self, agent: Any, task: Any, resources: Resources) -> AgentFrameworkOutput:
        result = await self.rollout_copy(agent).run(task_text(task))
        return summarize(result)


@contextmanager
def _shared(types: tuple[type, ...]) -> Iterator[None]:
    """While copying, objects of ``types`` copy to themselves."""
    own = [(t, vars(t).get("__deepcopy__")) for t in types]
    for t in types:
        t.__deepcopy__ = _itself  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for t, previous in own:
            if previous is None:
                del t.__deepcopy__  # type: ignore[attr-defined]
            else:
                t.__deepcopy__ = previous  # type: ignore[attr-defined]


def _itself(self: Any, memo: dict[int, Any]) -> Any:
    return self


def summarize(result: Any) -> AgentFrameworkOutput:
    """An ``AgentFrameworkOutput`` from an ``AgentResponse`` or a ``WorkflowRunResult``."""
    get_outputs = getattr(result, "get_outputs", None)
    outputs = list(get_outputs()) if callable(get_outputs) else [result]
    messages: list[dict[str, Any]] = []
    for output in outputs:
        for message in _messages_of(output):
            messages.append(
                {
                    "author": getattr(message, "author_name", None),
                    "role": str(getattr(message, "role", "")),
                    "text": getattr(message, "text", None) or "",
                }
            )
    last = outputs[-1] if outputs else None
    text = getattr(last, "text", None) if last is not None else None
    if not isinstance(text, str):
        text = messages[-1]["text"] if messages else ("" if last is None else str(last))
    output = AgentFrameworkOutput(text=text, messages=messages)
    output.result = result
    return output


def _messages_of(output: Any) -> list[Any]:
    if isinstance(output, list):
        return [m for item in output for m in _messages_of(item)]
    found = getattr(output, "messages", None)
    if isinstance(found, list):
        return found
    return [output] if hasattr(output, "role") else []
