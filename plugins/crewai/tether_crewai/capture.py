"""What the CrewAI adapter captures, and the seams it uses.

- Handlers on CrewAI's event bus (``crewai.events.crewai_event_bus``): ``LLMCallCompletedEvent`` /
  ``LLMCallFailedEvent`` become ``llm`` spans, ``ToolUsageFinishedEvent`` / ``ToolUsageErrorEvent`` become
  ``tool`` spans (``tool.name``, ``tool.arguments``, ``tool.result`` or ``tool.error``), each named after
  ``event.agent_role``. CrewAI runs these handlers on its own thread pool, in a copy of the emitting
  context, so the rollout scope (and the sink's attribution) carries over; the adapter flushes the pool
  (``crewai_event_bus.flush()``) before the attempt closes.
- A request listener on tether's endpoint redirect: CrewAI serialises an event's messages only five levels
  deep (a tool call's name arrives as ``"'lookup'"``), so the exact request body is recorded when the SDK
  builds it — in the caller's thread, keyed by CrewAI's own call id — and the ``llm`` span carries it as
  ``request.messages`` (OpenAI-format dicts) and ``request.tools``, with the proxy's ``call_id``.
- A wrapper around ``Agent.execute_task`` / ``aexecute_task`` that runs each task inside
  ``tether.capture.context.agent_scope(agent.role)``: every model request the agent makes then carries its role in
  the ``X-Tether-Agent`` header, which names the proxy's span (the one with token ids). CrewAI copies the
  context into the threads it starts (async tasks, task timeouts), so the name follows; a delegated task
  runs under the coworker's role.
- A wrapper around ``Task._export_output`` / ``_aexport_output`` (private; where CrewAI turns an answer into
  a task's ``output_json`` / ``output_pydantic``, asking the model again when the answer is not valid JSON)
  that runs the conversion under ``"<agent role>.converter"`` (``converter_name``): those calls can be named
  in ``optimize=`` and policy maps like any agent's.

Capture never breaks the crew: an event that cannot be turned into a span is logged (debug) and skipped.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from tether import spans
from tether.capture.context import RolloutScope, agent_scope, current_agent_name
from tether.plugin.adapters import SpanSink
from tether.plugin.adapters import json_safe as plain
from tether.plugin.adapters import tool_arguments as _arguments
from tether.types import SpanKind

log = logging.getLogger(__name__)

LLM_SPAN_NAME = "crewai.llm_call"

#: the keys an OpenAI chat message may carry (CrewAI adds its own, such as ``cache_breakpoint``)
_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


def _role_message(message: Any) -> Any:
    if not isinstance(message, dict):
        return plain(message)
    return {k: plain(message[k]) for k in _MESSAGE_KEYS if k in message}


def response_message(response: Any) -> dict[str, Any]:
    """An ``LLMCallCompletedEvent.response`` as an OpenAI assistant message: CrewAI gives the text, or the
    list of tool calls when the model asked for tools."""
    if isinstance(response, list) and all(isinstance(c, dict) and "function" in c for c in response):
        return {"role": "assistant", "content": None, "tool_calls": plain(response)}
    if isinstance(response, str) or response is None:
        return {"role": "assistant", "content": response}
    return {"role": "assistant", "content": plain(response)}


class RequestLog:
    """The request bodies of in-flight model calls, keyed by CrewAI's call id (a redirect listener)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: dict[str, tuple[dict[str, Any], str, float]] = {}

    def __call__(self, body: Any, scope: RolloutScope, call_id: str) -> None:
        from crewai.llms.base_llm import get_current_call_id

        crew_call = get_current_call_id()
        if crew_call is None or not isinstance(body, dict):
            return  # not a CrewAI model call
        request = {"messages": plain(body.get("messages")), "tools": plain(body.get("tools"))}
        with self._lock:
            self._bodies[crew_call] = (request, call_id, time.time())

    def pop(self, crew_call: str | None) -> tuple[dict[str, Any], str, float] | None:
        if crew_call is None:
            return None
        with self._lock:
            return self._bodies.pop(crew_call, None)

    def clear(self) -> None:
        with self._lock:
            self._bodies.clear()

    def __len__(self) -> int:
        return len(self._bodies)


class EventHandlers:
    """Turns CrewAI events into spans on the current sink. One plain function per event type, so the bus can
    remove exactly what was added."""

    def __init__(self, sink_of: Callable[[], SpanSink | None], requests: RequestLog) -> None:
        self._sink_of = sink_of
        self._requests = requests

    def handlers(self) -> list[tuple[type, Callable[[Any, Any], None]]]:
        from crewai.events.types.llm_events import LLMCallCompletedEvent, LLMCallFailedEvent
        from crewai.events.types.tool_usage_events import ToolUsageErrorEvent, ToolUsageFinishedEvent

        return [
            (LLMCallCompletedEvent, self._guarded(self.llm_completed)),
            (LLMCallFailedEvent, self._guarded(self.llm_failed)),
            (ToolUsageFinishedEvent, self._guarded(self.tool_finished)),
            (ToolUsageErrorEvent, self._guarded(self.tool_error)),
        ]

    def _guarded(self, method: Callable[[SpanSink, Any], None]) -> Callable[[Any, Any], None]:
        def handler(source: Any, event: Any) -> None:
            sink = self._sink_of()
            if sink is None:
                return
            try:
                method(sink, event)
            except Exception:  # never let capture break the crew
                log.debug("tether_crewai could not capture a CrewAI %s", type(event).__name__, exc_info=True)

        handler.__name__ = f"tether_{method.__name__}"
        return handler

    def _llm_span(self, sink: SpanSink, event: Any, attributes: dict[str, Any]) -> None:
        recorded = self._requests.pop(getattr(event, "call_id", None))
        end = event.timestamp.timestamp()
        start = end
        if recorded is not None:
            request, proxy_call_id, start = recorded
            attributes[spans.REQUEST_MESSAGES] = request["messages"]
            if request.get("tools"):
                attributes[spans.REQUEST_TOOLS] = request["tools"]
            attributes[spans.CALL_ID] = proxy_call_id
        elif isinstance(getattr(event, "messages", None), list):  # lossy: CrewAI's serialisation, cleaned up
            attributes[spans.REQUEST_MESSAGES] = [_role_message(m) for m in event.messages]
        if event.model:
            attributes[spans.REQUEST_MODEL] = event.model
        sink.emit(
            SpanKind.LLM,
            LLM_SPAN_NAME,
            attributes,
            agent_name=event.agent_role or current_agent_name(),
            start_time=min(start, end),
            end_time=end,
        )

    def llm_completed(self, sink: SpanSink, event: Any) -> None:
        attributes: dict[str, Any] = {spans.RESPONSE: response_message(event.response)}
        if event.usage:
            attributes[spans.USAGE] = plain(event.usage)
        if event.finish_reason:
            attributes["finish_reason"] = event.finish_reason
        self._llm_span(sink, event, attributes)

    def llm_failed(self, sink: SpanSink, event: Any) -> None:
        self._llm_span(sink, event, {spans.ERROR: str(event.error)})

    def tool_finished(self, sink: SpanSink, event: Any) -> None:
        attributes: dict[str, Any] = {
            spans.TOOL_NAME: event.tool_name,
            spans.TOOL_ARGUMENTS: _arguments(event.tool_args),
        }
        failure = getattr(event, "failure", None)
        if failure is not None:
            attributes[spans.TOOL_ERROR] = str(getattr(failure, "message", None) or failure)
        else:
            attributes[spans.TOOL_RESULT] = plain(event.output)
        if event.from_cache:
            attributes[spans.TOOL_FROM_CACHE] = True
        sink.emit(
            SpanKind.TOOL,
            str(event.tool_name),
            attributes,
            agent_name=event.agent_role,
            start_time=event.started_at.timestamp(),
            end_time=event.finished_at.timestamp(),
        )

    def tool_error(self, sink: SpanSink, event: Any) -> None:
        at = event.timestamp.timestamp()
        sink.emit(
            SpanKind.TOOL,
            str(event.tool_name),
            {
                spans.TOOL_NAME: event.tool_name,
                spans.TOOL_ARGUMENTS: _arguments(event.tool_args),
                spans.TOOL_ERROR: str(event.error),
            },
            agent_name=event.agent_role,
            start_time=at,
            end_time=at,
        )


def role_of(agent: Any) -> str | None:
    role = getattr(agent, "role", None)
    return role if isinstance(role, str) and role else None


CONVERTER_SUFFIX = ".converter"


def converter_name(role: str | None) -> str | None:
    """The sub-agent name of the calls that convert ``role``'s answer to a task's structured output (the role
    without surrounding whitespace: a YAML-folded role ends in a newline)."""
    return f"{role.strip()}{CONVERTER_SUFFIX}" if role and role.strip() else None


def make_export_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``Task._export_output`` or ``_aexport_output`` so the conversion runs under the converter's name."""

    def _name(task: Any) -> str | None:
        return converter_name(role_of(getattr(task, "agent", None)))

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def _aexport_output(self: Any, *args: Any, **kwargs: Any) -> Any:
            with agent_scope(_name(self)):
                return await original(self, *args, **kwargs)

        return _aexport_output

    @functools.wraps(original)
    def _export_output(self: Any, *args: Any, **kwargs: Any) -> Any:
        with agent_scope(_name(self)):
            return original(self, *args, **kwargs)

    return _export_output


def make_execute_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``Agent.execute_task`` or ``aexecute_task`` so the task runs under the agent's role."""
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def aexecute_task(self: Any, *args: Any, **kwargs: Any) -> Any:
            with agent_scope(role_of(self)):
                return await original(self, *args, **kwargs)

        wrapper: Callable[..., Any] = aexecute_task
    else:

        @functools.wraps(original)
        def execute_task(self: Any, *args: Any, **kwargs: Any) -> Any:
            with agent_scope(role_of(self)):
                return original(self, *args, **kwargs)

        wrapper = execute_task
    return wrapper
