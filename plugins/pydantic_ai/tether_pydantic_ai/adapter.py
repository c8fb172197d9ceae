"""The adapter for PydanticAI agents (``pydantic_ai.Agent``), agents delegated to from tools included.

``run(agent, task, resources)`` is ``await agent.run(<task text>)`` (``tether.plugin.tasks.task_text``: the task
when it is a string; for a dict, the first string among its ``"task"``, ``"question"``, ``"input"`` and
``"prompt"`` keys, else the dict as JSON) and returns a ``PydanticAIOutput``: a ``RunOutput`` dict with
``"text"`` (the output as text: a structured output as JSON) and ``"output"`` (the output, JSON-safe), with the
``AgentRunResult`` as ``.run_result``. An agent with ``deps_type`` needs its dependencies: pass
``run=lambda agent, task: agent.run(task["prompt"], deps=...)`` (a default run of such an agent that fails
raises ``DepsNeeded``, which says so) (``run_stream``, ``iter`` and ``run_sync`` from a
worker thread work the same way).

Every model request reaches tether's proxy through tether's endpoint redirect: PydanticAI's OpenAI models
(``'openai:<m>'``, which is ``OpenAIResponsesModel`` and calls ``/v1/responses``; ``'openai-chat:<m>'`` and
``OpenAIChatModel``, ``/v1/chat/completions``) keep an ``openai.AsyncOpenAI`` client, built with the provider,
whose requests the redirect sends to the rollout's proxy however the client was built. PydanticAI agents hold
no run state (concurrent runs of one agent are safe), so a rollout runs the user's agent itself. Capture
(names, unnamed agents, tool spans) is in ``tether_pydantic_ai.capture``.
"""

from __future__ import annotations

import json
from typing import Any

from tether.capture.context import add_agent_resolver, remove_agent_resolver
from tether.plugin.adapters import Adapter, SpanSink, json_safe
from tether.plugin.instrument import Patch
from tether.plugin.tasks import RunOutput, task_text
from tether.types import Resources
from tether_pydantic_ai.capture import agent_name, check_seams, infer_name_wrapper, tool_wrapper


class PydanticAIOutput(RunOutput):
    """What ``PydanticAIAdapter.run`` returns: ``{"text", "output"}`` plus ``.run_result``."""

    run_result: Any = None


def summarize(result: Any) -> PydanticAIOutput:
    """A ``PydanticAIOutput`` from an ``AgentRunResult``."""
    output = json_safe(result.output)
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    summary = PydanticAIOutput(text=text, output=output)
    summary.run_result = result
    return summary


class PydanticAIAdapter(Adapter):
    """Runs PydanticAI agents; captures their tool calls and names every call by its agent."""

    name = "pydantic_ai"
    extra = "pydantic-ai"
    agent_types = (("pydantic_ai.agent.abstract", "AbstractAgent"), ("pydantic_ai.agent", "Agent"))

    def _instrument(self, sink: SpanSink) -> None:
        check_seams()  # before anything is installed
        from pydantic_ai.agent.abstract import AbstractAgent
        from pydantic_ai.tool_manager import ToolManager

        self._patch(
            Patch(
                ToolManager, "_execute_tool_call_impl", lambda original: tool_wrapper(original, lambda: self.sink)
            ),
            Patch(AbstractAgent, "_infer_name", infer_name_wrapper),
        )
        add_agent_resolver(agent_name)

    def _uninstrument(self) -> None:
        remove_agent_resolver(agent_name)

    async def run(self, agent: Any, task: Any, resources: Resources) -> PydanticAIOutput:
        try:
            return summarize(await agent.run(task_text(task)))
        except Exception as exc:
            deps_type = getattr(agent, "deps_type", type(None))
            if deps_type is type(None):
                raise
            name = getattr(deps_type, "__name__", str(deps_type))
            raise DepsNeeded(
                f"agent {getattr(agent, 'name', None)!r} declares deps_type={name}, and tether's default run "
                f"passes no deps; its run failed ({type(exc).__name__}: {exc}). Pass a run= that gives them: "
                f"tether.wrap(agent, run=lambda agent, task: agent.run(task['prompt'], deps={name}(...)))"
            ) from exc


class DepsNeeded(RuntimeError):
    """An agent with ``deps_type`` failed under the default run, which has no dependencies to pass."""
