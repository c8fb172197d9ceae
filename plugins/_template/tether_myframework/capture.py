"""MyFramework's calls as tether sees them: each agent's run named after the agent, each tool call a span.

Model calls need nothing here: the runner's endpoint redirect sends every ``openai`` request of a rollout to
tether's proxy, which records it under the name ``agent_scope`` sets. TODO(framework): if the framework
already knows which agent is running (a context variable, a run tree), register a resolver with
``tether.capture.context.add_agent_resolver`` instead of wrapping its run method; if it has callbacks or an
event bus for tool calls, emit the spans from there instead of wrapping a method.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from tether import spans
from tether.capture.context import agent_scope, current_agent_name
from tether.plugin.adapters import SpanSink, json_safe
from tether.types import SpanKind

RunMethod = Callable[[Any, str], Awaitable[Any]]
ToolMethod = Callable[[Any, str, dict[str, Any]], Awaitable[Any]]


def named_run(original: RunMethod) -> RunMethod:
    """The agent's run method, with the model calls it makes named after the agent."""

    async def run(self: Any, task: str) -> Any:
        with agent_scope(self.name):  # TODO(framework): where the agent keeps its name
            return await original(self, task)

    return run


def captured_call_tool(original: ToolMethod, sink: Callable[[], SpanSink | None]) -> ToolMethod:
    """The agent's tool-calling method, emitting a ``tool`` span to ``sink()`` for each call."""

    async def call_tool(self: Any, name: str, arguments: dict[str, Any]) -> Any:
        attributes: dict[str, Any] = {spans.TOOL_NAME: name, spans.TOOL_ARGUMENTS: json_safe(arguments)}
        start = time.time()
        try:
            result = await original(self, name, arguments)
        except Exception as exc:
            attributes[spans.TOOL_ERROR] = f"{type(exc).__name__}: {exc}"
            raise
        else:
            attributes[spans.TOOL_RESULT] = json_safe(result)
            return result
        finally:
            target = sink()
            if target is not None:
                target.emit(
                    SpanKind.TOOL,
                    name,
                    attributes,
                    agent_name=current_agent_name(),
                    start_time=start,
                    end_time=time.time(),
                )

    return call_tool
