"""What the AutoGen adapter captures, and the two seams it uses.

- A ``logging.Handler`` on AutoGen's event logger (``autogen_core.EVENT_LOGGER_NAME``): ``LLMCallEvent``
  (and a streamed call's ``LLMStreamStartEvent`` + ``LLMStreamEndEvent``) becomes an ``llm`` span with the
  request messages (OpenAI-format dicts, deep-copied) and the response; ``ToolCallEvent`` (logged by
  ``BaseTool.run_json`` only when a tool succeeds) becomes a ``tool`` span when the tool ran outside an
  agent turn seen below (inside one, the turn records it).
- A wrapper around ``AssistantAgent.on_messages_stream`` that runs each step of the agent's turn inside
  ``tether.capture.context.agent_scope(agent.name)``. Every model call made during the turn — including the
  reflection call, and the calls of agents inside teams — therefore carries the agent's name: on the spans
  above, and in the ``X-Tether-Agent`` header the endpoint redirect adds, which names the proxy's span (the one
  with token ids). The wrapper also reads the turn's ``ToolCallRequestEvent`` / ``ToolCallExecutionEvent``
  messages and records every result of the turn as a ``tool`` span (arguments, result or ``tool.error``,
  call id, the agent's name): AutoGen logs no ``ToolCallEvent`` for a failing tool, nor for a tool answered
  by a workbench without ``BaseTool.run_json`` (``McpWorkbench``: an MCP server's tools).

Capture never breaks the agent: a span that cannot be built is logged (at debug level) and skipped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable
from contextvars import ContextVar
from typing import Any

from tether import spans
from tether.capture.context import agent_scope, current_agent, current_agent_name
from tether.plugin.adapters import SpanSink
from tether.plugin.adapters import json_safe as plain
from tether.plugin.adapters import tool_arguments as _arguments
from tether.types import SpanKind

log = logging.getLogger(__name__)

LLM_SPAN_NAME = "autogen.llm_call"


#: True while a step of an ``AssistantAgent`` turn runs (and in the tool tasks it starts): its tool calls are
#: recorded from the turn's events, with their call ids, so the event logger's ``ToolCallEvent`` is skipped
_in_turn: ContextVar[bool] = ContextVar("tether_autogen_in_turn", default=False)


def _stream_key() -> int:
    """Pairs a streamed call's start and end events: they are logged from the same task (or thread)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return id(task) if task is not None else threading.get_ident()


class EventHandler(logging.Handler):
    """Turns AutoGen's logged events into spans on ``sink``."""

    def __init__(self, sink: SpanSink) -> None:
        super().__init__(level=logging.INFO)
        self.sink = sink
        self._streams: dict[int, tuple[list[Any], float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        event = record.msg
        kwargs = getattr(event, "kwargs", None)
        if not isinstance(kwargs, dict):
            return
        try:
            kind = kwargs.get("type")
            if kind == "LLMCall":
                self._llm_span(kwargs["messages"], kwargs["response"], kwargs, record.created, record.created)
            elif kind == "LLMStreamStart":
                self._streams[_stream_key()] = (plain(kwargs["messages"]), record.created)
            elif kind == "LLMStreamEnd":
                messages, start = self._streams.pop(_stream_key(), (None, record.created))
                self._llm_span(messages, kwargs["response"], kwargs, start, record.created, streamed=True)
            elif kind == "ToolCall" and not _in_turn.get():
                self.sink.emit(
                    SpanKind.TOOL,
                    str(kwargs["tool_name"]),
                    spans.tool_attributes(
                        kwargs["tool_name"], plain(kwargs.get("arguments")), result=kwargs.get("result")
                    ),
                    agent_name=current_agent_name(),
                    start_time=record.created,
                    end_time=record.created,
                )
        except Exception:  # never let capture break the agent
            log.debug("tether_autogen could not capture an AutoGen event", exc_info=True)

    def _llm_span(
        self,
        messages: Any,
        response: Any,
        kwargs: dict[str, Any],
        start: float,
        end: float,
        *,
        streamed: bool = False,
    ) -> None:
        attributes: dict[str, Any] = {
            spans.REQUEST_MESSAGES: plain(messages) if messages is not None else None,
            spans.RESPONSE: plain(response),
            spans.USAGE: {
                "prompt_tokens": kwargs.get("prompt_tokens"),
                "completion_tokens": kwargs.get("completion_tokens"),
            },
        }
        if kwargs.get("tools"):
            attributes[spans.REQUEST_TOOLS] = plain(kwargs["tools"])
        if streamed:
            attributes["streamed"] = True
        agent = current_agent_name()
        self.sink.emit(SpanKind.LLM, LLM_SPAN_NAME, attributes, agent_name=agent, start_time=start, end_time=end)


class _TurnTools:
    """Follows one agent turn's tool-call events and emits a ``tool`` span for every result."""

    def __init__(self, sink_of: Callable[[], SpanSink | None]) -> None:
        self._sink_of = sink_of
        self._requested: dict[str, tuple[str, Any, float]] = {}  # call id -> (name, arguments, time)

    def see(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "ToolCallRequestEvent":
            now = time.time()
            for call in event.content:
                self._requested[call.id] = (call.name, _arguments(call.arguments), now)
        elif kind == "ToolCallExecutionEvent":
            sink = self._sink_of()
            for result in event.content:
                name, arguments, start = self._requested.pop(result.call_id, (result.name, None, time.time()))
                if sink is None:
                    continue
                name = result.name or name
                failed = bool(result.is_error)
                sink.emit(
                    SpanKind.TOOL,
                    str(name),
                    spans.tool_attributes(
                        name,
                        arguments,
                        result=None if failed else result.content,
                        error=result.content if failed else None,
                        call_id=result.call_id,
                    ),
                    agent_name=current_agent_name(),
                    start_time=start,
                )


def make_turn_wrapper(
    original: Callable[..., AsyncGenerator[Any, None]], sink_of: Callable[[], SpanSink | None]
) -> Callable[..., AsyncGenerator[Any, None]]:
    """Wrap ``on_messages_stream`` so each step of the turn runs under the agent's name.

    The name is set and reset around each step (not across ``yield``), so it never leaks into the consumer
    of the stream (a team's container, ``run_stream``) between steps; tasks the agent creates during a step
    (tool calls, model streams) copy the context and keep the name.
    """

    async def on_messages_stream(self: Any, messages: Any, cancellation_token: Any) -> AsyncGenerator[Any, None]:
        name = getattr(self, "name", None)
        stream = original(self, messages, cancellation_token)
        tools = _TurnTools(sink_of)
        try:
            while True:
                token = current_agent.set(name)
                in_turn = _in_turn.set(True)
                try:
                    event = await stream.__anext__()
                    tools.see(event)
                except StopAsyncIteration:
                    return
                finally:
                    _in_turn.reset(in_turn)
                    current_agent.reset(token)
                yield event
        finally:
            with agent_scope(name):
                await stream.aclose()

    on_messages_stream.__wrapped__ = original  # type: ignore[attr-defined]
    on_messages_stream.__doc__ = original.__doc__
    on_messages_stream.__qualname__ = getattr(original, "__qualname__", "on_messages_stream")
    return on_messages_stream
