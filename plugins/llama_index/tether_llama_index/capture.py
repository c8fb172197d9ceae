"""What the LlamaIndex adapter patches to name and capture calls, and how.

- ``take_step`` of every workflow agent class (``FunctionAgent``, ``ReActAgent``, ``CodeActAgent``, and any
  imported subclass of ``BaseWorkflowAgent`` that defines its own): one step of an agent is one model call (a
  streamed one by default: ``FunctionAgent`` calls ``astream_chat_with_tools`` and consumes the stream inside the
  step), made under ``tether.capture.context.agent_scope(agent.name)``, so the endpoint redirect's
  ``X-Tether-Agent`` header names the agent on the proxy's span (the one with token ids). In an ``AgentWorkflow``
  the workflow calls the current agent's ``take_step``, so each call is named by the agent whose turn it is,
  handoffs included.
- ``_call_tool`` of ``AgentWorkflow`` and ``BaseWorkflowAgent`` (where every tool, the ``handoff`` tool included,
  is called): each call becomes a ``tool`` span with the tool's name, its arguments, the result's text (or
  ``tool.error`` when the tool failed: LlamaIndex turns the exception into an error output for the model) and
  the agent whose model asked for it (the workflow's ``current_agent_name``; a lone agent's own name).

Capture never breaks the agent: a span that cannot be built is logged (debug) and skipped.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tether import spans
from tether.capture.context import agent_scope
from tether.plugin.adapters import SpanSink, json_safe
from tether.types import SpanKind

log = logging.getLogger(__name__)

#: the context key under which an ``AgentWorkflow`` keeps the agent whose turn it is
CURRENT_AGENT_KEY = "current_agent_name"


def make_step_wrapper(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap an agent class's ``take_step`` so its model call carries the agent's name."""

    @functools.wraps(original)
    async def take_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        with agent_scope(getattr(self, "name", None) or None):
            return await original(self, *args, **kwargs)

    return take_step


def make_call_tool_wrapper(
    original: Callable[..., Awaitable[Any]], sink_of: Callable[[], SpanSink | None], *, multi_agent: bool
) -> Callable[..., Awaitable[Any]]:
    """Wrap ``_call_tool(self, ctx, tool, tool_input)`` to record each call as a ``tool`` span."""

    @functools.wraps(original)
    async def _call_tool(self: Any, ctx: Any, tool: Any, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        agent = await _agent_of(self, ctx) if multi_agent else getattr(self, "name", None)
        output = await original(self, ctx, tool, tool_input, *args, **kwargs)
        _emit(sink_of(), tool, tool_input, output, start, agent)
        return output

    return _call_tool


async def _agent_of(workflow: Any, ctx: Any) -> str | None:
    try:
        name = await ctx.store.get(CURRENT_AGENT_KEY, default=None)
    except Exception:  # never let capture break the agent
        log.debug("tether_llama_index could not read the current agent", exc_info=True)
        return None
    return str(name) if name else None


def _emit(sink: SpanSink | None, tool: Any, tool_input: Any, output: Any, start: float, agent: str | None) -> None:
    if sink is None:
        return
    try:
        metadata = getattr(tool, "metadata", None)
        name = str(getattr(metadata, "name", None) or getattr(output, "tool_name", None) or type(tool).__name__)
        failed = bool(getattr(output, "is_error", False))
        text = getattr(output, "content", None)
        if not isinstance(text, str):
            text = json_safe(getattr(output, "raw_output", output))
        attributes = spans.tool_attributes(
            name,
            json_safe(dict(tool_input) if isinstance(tool_input, dict) else tool_input),
            result=None if failed else text,
            error=text if failed else None,
        )
        sink.emit(SpanKind.TOOL, name, attributes, agent_name=agent, start_time=start)
    except Exception:  # never let capture break the agent
        log.debug("tether_llama_index could not capture a tool call", exc_info=True)
