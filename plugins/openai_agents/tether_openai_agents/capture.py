"""The trace processor that captures an OpenAI Agents SDK run as tether spans, and keeps rollouts at home.

Imported only when the SDK is (it subclasses ``agents.tracing.TracingProcessor``). While tether holds it
(``tether_openai_agents.gate``) it is the SDK's only trace processor, and it splits events by context:

- inside a rollout (``tether.capture.context.current_scope`` is set) events are captured and never forwarded, so
  nothing about a rollout reaches the SDK's default uploader (api.openai.com) or any other processor;
- outside a rollout events go to the processors that were installed before (the user's own tracing keeps
  working), unless tracing was disabled then — tether turns the SDK's tracing on while it holds the gate,
  since capture needs the spans, and drops what the user would not have seen.

What a rollout's spans become:

- ``GenerationSpanData`` → ``llm`` span ``openai_agents.generation``: ``request.messages`` (the chat
  completions messages exactly as sent, system instructions first), ``request.model``, ``response`` (the
  assistant message), ``usage`` and ``error`` when the call failed. The proxy's span of the same call holds
  the token ids and, from the request header, the agent (see below); this one is for inspection.
- ``FunctionSpanData`` → ``tool`` span: ``tool.name``, ``tool.arguments`` (parsed JSON, or the raw text),
  ``tool.result`` or ``tool.error``. The SDK turns a tool's exception into a message to the model and
  redacts its text on the span (0.24); ``tool.error`` is the exception (``"ZeroDivisionError: division by
  zero"``) when the run's ``tool_error_formatter`` reported it (``record_tool_error``; the adapter's default
  run installs one; 0.20 never reports exceptions to it), else the SDK's own description of the failure
  (``"Error running tool (non-fatal): division by zero"``), and ``tool.output`` what the model was told.
- ``HandoffSpanData`` → ``other`` span ``handoff`` with ``handoff.from`` and ``handoff.to``.

The agent of a span is the name of its nearest ``AgentSpanData`` ancestor. ``agent_name()`` gives the agent
of the SDK's current span; tether's endpoint redirect calls it (as an agent resolver) for the
``X-Tether-Agent`` header of each model request, so the proxy's span is named too. Capture never breaks
the agent: a span that cannot be converted is logged at debug level and skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    GenerationSpanData,
    HandoffSpanData,
    Span,
    Trace,
    TracingProcessor,
    get_current_span,
)

from tether import spans
from tether.capture.context import current_scope
from tether.plugin.adapters import SpanSink, tool_arguments
from tether.plugin.adapters import json_safe as _plain
from tether.types import SpanKind

log = logging.getLogger(__name__)

LLM_SPAN_NAME = "openai_agents.generation"
HANDOFF_SPAN_NAME = "handoff"


@dataclass(slots=True)
class _Open:
    trace_id: str
    agent: str | None
    start: float


class TetherTraceProcessor(TracingProcessor):
    """Captures rollout spans into ``sink`` (when set) and forwards everything else to ``previous``."""

    def __init__(self, previous: Sequence[TracingProcessor], *, forward: bool) -> None:
        self.previous: tuple[TracingProcessor, ...] = tuple(previous)
        self.forward = forward
        self.sink: SpanSink | None = None
        self._open: dict[str, _Open] = {}  # span id -> its trace, agent and start time (rollout spans only)
        self._lock = threading.Lock()
        self.tool_errors: dict[str, str] = {}  # function span id -> the exception text (record_tool_error)

    # -- the SDK's processor interface --------------------------------------------------------------------

    def on_trace_start(self, trace: Trace) -> None:
        if current_scope.get() is None:
            self._forward("on_trace_start", trace)

    def on_trace_end(self, trace: Trace) -> None:
        if current_scope.get() is None:
            self._forward("on_trace_end", trace)
            return
        trace_id = trace.trace_id
        with self._lock:  # spans a cancelled run never ended
            for span_id in [k for k, v in self._open.items() if v.trace_id == trace_id]:
                del self._open[span_id]
                self.tool_errors.pop(span_id, None)

    def on_span_start(self, span: Span[Any]) -> None:
        if current_scope.get() is None:
            self._forward("on_span_start", span)
            return
        data = span.span_data
        if isinstance(data, AgentSpanData):
            agent: str | None = data.name
        else:
            parent = self._open.get(span.parent_id) if span.parent_id else None
            agent = parent.agent if parent is not None else None
        self._open[span.span_id] = _Open(span.trace_id, agent, time.time())

    def on_span_end(self, span: Span[Any]) -> None:
        if current_scope.get() is None:
            self._forward("on_span_end", span)
            return
        opened = self._open.pop(span.span_id, None)
        sink = self.sink
        if sink is None:
            self.tool_errors.pop(span.span_id, None)
            return
        try:
            self._emit(sink, span, opened)
        except Exception:  # never let capture break the agent
            log.debug("tether_openai_agents could not capture a span", exc_info=True)

    def shutdown(self) -> None:
        if self.forward:
            for processor in self.previous:
                processor.shutdown()

    def force_flush(self) -> None:
        if self.forward:
            for processor in self.previous:
                processor.force_flush()

    # -- queries ------------------------------------------------------------------------------------------

    def agent_name(self) -> str | None:
        """The agent of the SDK's current span (None outside an agent's span or outside a rollout)."""
        span = get_current_span()
        if span is None:
            return None
        opened = self._open.get(span.span_id)
        return opened.agent if opened is not None else None

    def record_tool_error(self, error: BaseException | None) -> None:
        """Remember the exception of the tool whose function span is current (its span gets the text)."""
        span = get_current_span()
        if error is not None and span is not None and span.span_id in self._open:
            self.tool_errors[span.span_id] = f"{type(error).__name__}: {error}"

    def open_spans(self) -> int:
        return len(self._open)

    # -- internals ----------------------------------------------------------------------------------------

    def _forward(self, method: str, item: Any) -> None:
        if not self.forward:
            return
        for processor in self.previous:
            try:
                getattr(processor, method)(item)
            except Exception:  # as the SDK's own multi-processor does: one processor must not break others
                log.debug("trace processor %r failed in %s", processor, method, exc_info=True)

    def _emit(self, sink: SpanSink, span: Span[Any], opened: _Open | None) -> None:
        data = span.span_data
        agent = opened.agent if opened is not None else None
        start = opened.start if opened is not None else None
        if isinstance(data, GenerationSpanData):
            attributes: dict[str, Any] = {
                spans.REQUEST_MESSAGES: _plain(data.input) if data.input is not None else None,
                spans.REQUEST_MODEL: data.model,
                spans.RESPONSE: _assistant_message(data.output),
            }
            if data.usage:
                attributes[spans.USAGE] = _plain(data.usage)
            if span.error:
                attributes[spans.ERROR] = _error_text(span.error)
            sink.emit(SpanKind.LLM, LLM_SPAN_NAME, attributes, agent_name=agent, start_time=start)
        elif isinstance(data, FunctionSpanData):
            attributes = {spans.TOOL_NAME: data.name, spans.TOOL_ARGUMENTS: tool_arguments(data.input)}
            caught = self.tool_errors.pop(span.span_id, None)
            if span.error or caught:
                attributes[spans.TOOL_ERROR] = caught or _error_text(span.error)
                if data.output is not None:
                    attributes[spans.TOOL_OUTPUT] = _plain(data.output)  # what the model was told instead
            else:
                attributes[spans.TOOL_RESULT] = _plain(data.output)
            sink.emit(SpanKind.TOOL, str(data.name), attributes, agent_name=agent, start_time=start)
        elif isinstance(data, HandoffSpanData):
            attributes = {"handoff.from": data.from_agent, "handoff.to": data.to_agent}
            sink.emit(SpanKind.OTHER, HANDOFF_SPAN_NAME, attributes, agent_name=agent, start_time=start)


def _assistant_message(output: Any) -> Any:
    """The assistant message of a chat completion, without the fields the server left empty."""
    if not output:
        return None
    message = output[0] if isinstance(output, list | tuple) else output
    if isinstance(message, dict):
        return _plain({k: v for k, v in message.items() if v is not None})
    return _plain(message)


def _error_text(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    message = str(error.get("message") or "error")
    data = error.get("data") or {}
    detail = data.get("error") if isinstance(data, dict) else data
    return f"{message}: {detail}" if detail else message
