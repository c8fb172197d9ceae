"""What the Google ADK adapter patches to name and capture calls, and how.

ADK's ``PluginManager`` is where every Runner (one tether makes, or the user's own, built before or after
``tether.wrap``) dispatches its plugins' callbacks, for every agent under it (``sub_agents`` after a
``transfer_to_agent`` and ``AgentTool`` sub-agents included). While instrumented:

- ``run_before_model_callback`` sets ``tether.capture.context.current_agent`` to
  ``callback_context.agent_name`` just before the agent's model call, in the same task, so the endpoint
  redirect's ``X-Tether-Agent`` header names the agent on the proxy's span (the one with token ids);
- ``run_before_tool_callback`` / ``run_after_tool_callback`` / ``run_on_tool_error_callback`` record each tool
  call (``transfer_to_agent`` included) as a ``tool`` span with its name, arguments, result or error, and
  ``tool_context.agent_name``.

Capture never breaks the agent: a span that cannot be built is logged (debug) and skipped.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tether import spans
from tether.capture.context import current_agent, current_scope
from tether.plugin.adapters import SpanSink, json_safe
from tether.types import SpanKind

log = logging.getLogger(__name__)

SinkOf = Callable[[], SpanSink | None]
_STARTED = "_tether_started"


def make_before_model(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def run_before_model_callback(self: Any, **kwargs: Any) -> Any:
        if current_scope.get() is not None:
            name = getattr(kwargs.get("callback_context"), "agent_name", None)
            current_agent.set(str(name) if name else None)  # read by the redirect in this task's model call
        return await original(self, **kwargs)

    return run_before_model_callback


def make_before_tool(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def run_before_tool_callback(self: Any, **kwargs: Any) -> Any:
        try:
            setattr(kwargs.get("tool_context"), _STARTED, time.time())
        except Exception:  # never let capture break the agent
            log.debug("tether_google_adk could not time a tool call", exc_info=True)
        return await original(self, **kwargs)

    return run_before_tool_callback


def make_after_tool(
    original: Callable[..., Awaitable[Any]], sink_of: SinkOf, *, failed: bool
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def run_tool_callback(self: Any, **kwargs: Any) -> Any:
        altered = await original(self, **kwargs)
        outcome = kwargs.get("error") if failed else (kwargs.get("result") if altered is None else altered)
        _emit(sink_of(), kwargs, outcome, failed)
        return altered

    return run_tool_callback


def _emit(sink: SpanSink | None, kwargs: dict[str, Any], outcome: Any, failed: bool) -> None:
    if sink is None or current_scope.get() is None:
        return
    try:
        tool, context = kwargs.get("tool"), kwargs.get("tool_context")
        name = str(getattr(tool, "name", None) or type(tool).__name__)
        args = kwargs.get("tool_args")
        attributes = spans.tool_attributes(
            name,
            json_safe(dict(args) if isinstance(args, dict) else args),
            result=None if failed else json_safe(outcome),
            error=f"{type(outcome).__name__}: {outcome}" if failed else None,
        )
        agent = getattr(context, "agent_name", None)
        start = getattr(context, _STARTED, None)
        sink.emit(
            SpanKind.TOOL,
            name,
            attributes,
            agent_name=str(agent) if agent else None,
            start_time=start if isinstance(start, float) else time.time(),
        )
    except Exception:  # never let capture break the agent
        log.debug("tether_google_adk could not capture a tool call", exc_info=True)
