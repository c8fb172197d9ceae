"""The adapter for LlamaIndex agents: a workflow agent (``FunctionAgent``, ``ReActAgent``, ``CodeActAgent``) or
a multi-agent ``AgentWorkflow``.

``run(agent, task, resources)`` is ``await agent.run(user_msg=<task text>)`` (the text is
``tether.plugin.tasks.task_text``'s) and returns a ``RunOutput``: ``{"text": <the final response>, "agent": <the
agent that gave it>, "state": <the run's workflow state, where the agents' tools keep what they wrote>}`` with
LlamaIndex's ``AgentOutput`` as ``.result``. Each run gets its own workflow
``Context``, so one agent object serves concurrent rollouts. Model calls reach tether's proxy through tether's
endpoint redirect (``llama_index.llms.openai.OpenAI`` is an ``openai.AsyncOpenAI`` client, on Chat Completions,
streamed by ``FunctionAgent``); inside rollouts it uses a per-event-loop client
(``tether_llama_index.loop_clients``). Naming and tool capture: ``tether_llama_index.capture``.

The adapter relies on LlamaIndex's private ``_call_tool`` (agent and workflow) and on the OpenAI LLM's
``_get_aclient`` and ``_get_credential_kwargs``; ``instrument`` checks them first and raises ``SeamMissing``
naming the installed version when a release moves them.
"""

from __future__ import annotations

import sys
from typing import Any

from tether.capture.patching import Seam
from tether.plugin.adapters import Adapter, SpanSink, json_safe
from tether.plugin.instrument import Patch
from tether.plugin.loop_pool import LoopPool
from tether.plugin.tasks import RunOutput, task_text
from tether.types import Resources
from tether_llama_index import loop_clients
from tether_llama_index.capture import make_call_tool_wrapper, make_step_wrapper

_LLM_MODULE = "llama_index.llms.openai.base"
_SEAM = Seam("llama-index-core", "tether_llama_index.adapter")
_LLM_SEAM = Seam("llama-index-llms-openai", "tether_llama_index.loop_clients")


class LlamaIndexOutput(RunOutput):
    """What ``LlamaIndexAdapter.run`` returns: ``{"text", "agent", "state"}`` plus ``.result``."""

    result: Any = None


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    pending = [cls]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(current.__subclasses__())
    return found


class LlamaIndexAdapter(Adapter):
    """Runs and captures LlamaIndex workflow agents and multi-agent ``AgentWorkflow``s."""

    name = "llama_index"
    extra = "llama-index"
    agent_types = (
        ("llama_index.core.agent.workflow.base_agent", "BaseWorkflowAgent"),
        ("llama_index.core.agent.workflow.multi_agent_workflow", "AgentWorkflow"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._clients = LoopPool()

    # -- capture ------------------------------------------------------------------------------------------

    def _instrument(self, sink: SpanSink) -> None:
        from llama_index.core.agent.workflow import AgentWorkflow
        from llama_index.core.agent.workflow.base_agent import BaseWorkflowAgent

        _SEAM.require(AgentWorkflow, "_call_tool")
        _SEAM.require(BaseWorkflowAgent, "_call_tool")
        _SEAM.require_parameters(AgentWorkflow._call_tool, "ctx", "tool", "tool_input")
        llm = getattr(sys.modules.get(_LLM_MODULE), "OpenAI", None)
        if isinstance(llm, type):
            _LLM_SEAM.require(llm, "_get_aclient", "_get_credential_kwargs")

        def sink_of() -> SpanSink | None:
            return self.sink

        self._patch(
            *(
                Patch(cls, "take_step", make_step_wrapper)
                for cls in _subclasses(BaseWorkflowAgent)
                if "take_step" in vars(cls) and not getattr(vars(cls)["take_step"], "__isabstractmethod__", False)
            ),
            Patch(AgentWorkflow, "_call_tool", lambda o: make_call_tool_wrapper(o, sink_of, multi_agent=True)),
            Patch(
                BaseWorkflowAgent, "_call_tool", lambda o: make_call_tool_wrapper(o, sink_of, multi_agent=False)
            ),
        )
        if isinstance(llm, type):
            self._patch(Patch(llm, "_get_aclient", lambda o: loop_clients.make_wrapper(o, self._clients)))

    def uninstrument(self) -> None:
        self._clients.close_for_running_loop()  # made in run()'s loop
        super().uninstrument()

    # -- running ------------------------------------------------------------------------------------------

    async def run(self, agent: Any, task: Any, resources: Resources) -> LlamaIndexOutput:
        handler = agent.run(user_msg=task_text(task))
        result = await handler
        state = None
        store = getattr(getattr(handler, "ctx", None), "store", None)
        if store is not None:
            state = await store.get("state", default=None)
        return summarize(result, state)


def summarize(result: Any, state: Any = None) -> LlamaIndexOutput:
    """A ``LlamaIndexOutput`` from an ``AgentOutput`` and the run's workflow state (``ctx.store["state"]``)."""
    response = getattr(result, "response", None)
    content = getattr(response, "content", None)
    text = content if isinstance(content, str) else str(result)
    output = LlamaIndexOutput(text=text, agent=getattr(result, "current_agent_name", None), state=json_safe(state))
    output.result = result
    return output
