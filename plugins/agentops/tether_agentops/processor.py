"""The OpenTelemetry span processor tether adds to AgentOps' tracer provider.

Imported only when the user's AgentOps is initialised (it imports the OpenTelemetry SDK). ``on_start`` notes,
for each span, the rollout it belongs to (tether's ``current_scope`` in the caller's context) and its agent
(its own, else its parent's, else the sub-agent tether knows is running); ``on_end`` converts the span and sends
it to the sink under that rollout, whatever thread ends it. Spans started outside any rollout are ignored. With
no sink (after ``uninstrument``) the processor does nothing.

While an AgentOps ``agent`` span is open inside a rollout, its name is also tether's current sub-agent
(``tether.capture.context.current_agent``, restored when the span ends), so the model calls the agent makes reach
the proxy under that name and ``optimize=`` can select AgentOps agents. The tool-call spans AgentOps' LLM
instrumentation opens for each tool call the model asked for are folded into that call's ``response``.
"""

from __future__ import annotations

import threading
from contextvars import Token
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from tether.capture.context import RolloutScope, current_agent, current_agent_name, current_scope
from tether.plugin.adapters import SpanSink
from tether_agentops.convert import agent_name_of, convert, is_llm, is_tool_call_request, kind_of, tool_call_of


@dataclass(slots=True)
class _Open:
    scope: RolloutScope | None
    agent: str | None
    span: Span | None = None
    agent_token: Token[str | None] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


class TetherSpanProcessor(SpanProcessor):
    """Reads every span of the provider it is added to and stores it as a tether span through ``sink``."""

    def __init__(self, sink: SpanSink | None = None) -> None:
        self.sink = sink
        self._open: dict[int, _Open] = {}
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.sink is None:
            return
        attrs = span.attributes or {}
        agent = agent_name_of(span.name, attrs)
        if agent is None and span.parent is not None:
            parent = self._open.get(span.parent.span_id)
            agent = parent.agent if parent is not None else None
        if agent is None:
            agent = current_agent_name()
        scope = current_scope.get()
        opened = _Open(scope, agent, span=span)
        if scope is not None and agent is not None and kind_of(attrs) == "agent":
            opened.agent_token = current_agent.set(agent)
        with self._lock:
            self._open[span.context.span_id] = opened

    def _on_ending(self, span: Span) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None:
            return
        with self._lock:
            opened = self._open.pop(context.span_id, None)
        if opened is not None and opened.agent_token is not None:
            _restore_agent(opened.agent_token)
        sink = self.sink
        if sink is None or opened is None or opened.scope is None:
            return
        attrs = span.attributes or {}
        if is_tool_call_request(attrs) and span.parent is not None:
            parent = self._open.get(span.parent.span_id)
            if parent is not None and parent.span is not None and is_llm(parent.span.attributes or {}):
                parent.tool_calls.append(tool_call_of(attrs))
                return
        converted = convert(span.name, attrs, _error_of(span), opened.tool_calls)
        converted.attributes.update(_ids(span))
        converted.attributes["source"] = "agentops"
        agent = agent_name_of(span.name, attrs) or opened.agent
        start = span.start_time / 1e9 if span.start_time is not None else None
        end = span.end_time / 1e9 if span.end_time is not None else None
        token = current_scope.set(opened.scope)  # the span may end on another thread or task
        try:
            sink.emit(
                converted.kind,
                converted.name,
                converted.attributes,
                agent_name=agent,
                start_time=start,
                end_time=end,
            )
        finally:
            current_scope.reset(token)

    def shutdown(self) -> None:
        self.forget()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def forget(self) -> None:
        with self._lock:
            self._open.clear()

    @property
    def open_spans(self) -> int:
        return len(self._open)


def _restore_agent(token: Token[str | None]) -> None:
    try:
        current_agent.reset(token)
    except (ValueError, RuntimeError):  # ended in another context (thread or task): that one never saw it
        pass


def _error_of(span: ReadableSpan) -> str | None:
    if span.status.status_code != StatusCode.ERROR:
        return None
    for event in span.events:
        if event.name == "exception" and event.attributes:
            kind = event.attributes.get("exception.type")
            message = event.attributes.get("exception.message")
            if message is not None:
                return f"{kind}: {message}" if kind else str(message)
    return span.status.description or "error"


def _ids(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    out: dict[str, Any] = {"otel.trace_id": f"{context.trace_id:032x}", "otel.span_id": f"{context.span_id:016x}"}
    if span.parent is not None:
        out["otel.parent_id"] = f"{span.parent.span_id:016x}"
    return out


def add_to(provider: Any, processor: TetherSpanProcessor) -> None:
    provider.add_span_processor(processor)


def remove_from(provider: Any, processor: TetherSpanProcessor) -> bool:
    """Take ``processor`` out of ``provider``'s processors; False when the provider's layout is not the SDK's
    (the caller then leaves it in place, inert). OpenTelemetry has no public way to remove a processor."""
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if multi is None or lock is None or not isinstance(getattr(multi, "_span_processors", None), tuple):
        return False
    with lock:
        multi._span_processors = tuple(p for p in multi._span_processors if p is not processor)
    return True


def processors_of(provider: Any) -> tuple[Any, ...]:
    """The span processors ``provider`` runs (for checks and tests)."""
    multi = getattr(provider, "_active_span_processor", None)
    return tuple(getattr(multi, "_span_processors", ()))
