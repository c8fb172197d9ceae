"""The adapter for smolagents agents (``ToolCallingAgent``, ``CodeAgent``, any ``MultiStepAgent``), managed agents
included.

``run(agent, task, resources)`` runs a rollout copy of the agent (``tether_smolagents.isolate``; a ``run=``
function is handed such a copy too) with ``copy.run(<task text>)`` in a worker thread (smolagents is synchronous;
the thread gets the rollout's context) and returns a ``SmolagentsOutput``: a ``RunOutput`` dict with ``"text"``
(the final answer as text), ``"output"`` (the final answer, JSON-safe) and ``"state"`` (``"success"`` or
``"max_steps_error"`` when the agent returns a full result), with the agent's ``RunResult`` or raw answer as
``.result``. The task text is ``tether.plugin.tasks.task_text``'s.

Model requests reach tether's proxy through tether's endpoint redirect: ``OpenAIServerModel`` keeps a synchronous
``openai.OpenAI`` client, built with the model, whose requests the redirect sends to the rollout's proxy however
it was built. ``InferenceClientModel`` (Hugging Face's own client) and ``TransformersModel`` do not use the openai
SDK and are not redirected: give the agents an ``OpenAIServerModel``. Capture (names, tool spans) is in
``tether_smolagents.capture``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tether.capture.patching import Seam
from tether.plugin.adapters import Adapter, SpanSink, json_safe
from tether.plugin.instrument import Patch
from tether.plugin.tasks import RunOutput, task_text
from tether.types import Resources
from tether_smolagents.capture import managed_call_wrapper, run_wrapper, timeout_wrapper, tool_wrapper

_SEAM = Seam("smolagents", "tether_smolagents.adapter")


class SmolagentsOutput(RunOutput):
    """What ``SmolagentsAdapter.run`` returns: ``{"text", "output", "state"}`` plus ``.result``."""

    result: Any = None


def summarize(result: Any) -> SmolagentsOutput:
    """A ``SmolagentsOutput`` from what ``agent.run`` returned (a ``RunResult`` or the final answer)."""
    full = hasattr(result, "output") and hasattr(result, "state") and hasattr(result, "steps")
    answer = json_safe(result.output if full else result)
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    summary = SmolagentsOutput(text=text, output=answer, state=result.state if full else "success")
    summary.result = result
    return summary


class SmolagentsAdapter(Adapter):
    """Runs smolagents agents; names every call by its agent and captures tool and managed-agent calls."""

    name = "smolagents"
    extra = "smolagents"
    agent_types = (("smolagents.agents", "MultiStepAgent"),)

    def _instrument(self, sink: SpanSink) -> None:
        from smolagents import local_python_executor
        from smolagents.agents import MultiStepAgent
        from smolagents.tools import Tool

        _SEAM.require(local_python_executor, "timeout")  # private: checked before anything is installed

        self._patch(
            Patch(MultiStepAgent, "run", run_wrapper),
            Patch(MultiStepAgent, "__call__", lambda original: managed_call_wrapper(original, lambda: self.sink)),
            Patch(Tool, "__call__", lambda original: tool_wrapper(original, lambda: self.sink)),
            Patch(local_python_executor, "timeout", timeout_wrapper),
        )

    def rollout_copy(self, agent: Any) -> Any:
        """A copy of the agent and its managed agents with their own run state (``tether_smolagents.isolate``)."""
        from tether_smolagents.isolate import fresh_copy

        return fresh_copy(agent)

    async def run(self, agent: Any, task: Any, resources: Resources) -> SmolagentsOutput:
        copy = self.rollout_copy(agent)
        return summarize(await asyncio.to_thread(copy.run, task_text(task)))
