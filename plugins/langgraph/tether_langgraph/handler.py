"""The LangChain callback handler that turns a graph's model and tool calls into tether spans.

Imported only by ``LangGraphAdapter.instrument`` (it subclasses LangChain's ``BaseCallbackHandler``). It runs
inline (``run_inline``), in the context of the run that fired the event, so the sink sees the current
rollout; events outside any rollout are ignored before any work is done. Spans:

- ``llm`` (one per chat-model call): ``request.messages`` — the messages as the OpenAI chat completions API
  receives them, deep-copied — ``response`` (the assistant message, same format), ``request.model``, and
  ``error`` if the call failed. The agent name is the graph node (``metadata["langgraph_node"]``). The proxy's
  span of the same call is the one with token ids; transitions use this one only to fill in a missing agent
  name, matching on the request messages.
- ``tool``: ``tool.name``, ``tool.arguments``, ``tool.call_id`` and ``tool.result`` or ``tool.error``.
  LangChain fires ``on_tool_error`` even when ``ToolNode(handle_tool_errors=...)`` turns the exception into a
  ``ToolMessage`` and the graph carries on, so an error span does not mean the rollout failed. Each tool run
  yields at most one span.
- ``other`` named ``graph`` with ``graph.name``: the name of each root chain (the graph being invoked).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import orjson
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages

from tether import spans
from tether.capture.context import current_scope
from tether.plugin.adapters import SpanSink
from tether.types import SpanKind


class TetherCallbackHandler(BaseCallbackHandler):
    """Sends LangChain events to ``sink`` while it is set; inert when ``sink`` is None."""

    run_inline = True
    raise_error = False

    def __init__(self) -> None:
        super().__init__()
        self.sink: SpanSink | None = None
        self._llm_calls: dict[UUID, tuple[float, str | None, str, list[dict[str, Any]], Any]] = {}
        self._tool_calls: dict[UUID, tuple[float, str | None, str, Any, Any]] = {}

    def detach(self) -> None:
        """Stop capturing and forget calls still open (a rollout cancelled mid-call never ends them)."""
        self.sink = None
        self._llm_calls.clear()
        self._tool_calls.clear()

    def _active_sink(self) -> SpanSink | None:
        return self.sink if current_scope.get() is not None else None

    # -- graph --------------------------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        sink = self._active_sink()
        if sink is None or parent_run_id is not None:
            return
        name = kwargs.get("name") or (serialized or {}).get("name") or "graph"
        sink.emit(SpanKind.OTHER, "graph", {"graph.name": str(name)})

    # -- model calls --------------------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._active_sink() is None or not messages:
            return
        params = kwargs.get("invocation_params") or {}
        model = params.get("model") or params.get("model_name")
        name = kwargs.get("name") or (serialized or {}).get("name") or "chat_model"
        self._llm_calls[run_id] = (time.time(), _node(metadata), str(name), openai_messages(messages[0]), model)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._llm_calls.pop(run_id, None)
        sink = self._active_sink()
        if call is None or sink is None:
            return
        start, node, name, request, model = call
        generations = getattr(response, "generations", None) or [[]]
        first = generations[0][0] if generations[0] else None
        message = getattr(first, "message", None)
        reply = openai_messages([message])[0] if isinstance(message, BaseMessage) else None
        attributes = {spans.REQUEST_MESSAGES: request, spans.REQUEST_MODEL: model, spans.RESPONSE: reply}
        sink.emit(SpanKind.LLM, name, attributes, agent_name=node, start_time=start)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._llm_calls.pop(run_id, None)
        sink = self._active_sink()
        if call is None or sink is None:
            return
        start, node, name, request, model = call
        attributes = {spans.REQUEST_MESSAGES: request, spans.REQUEST_MODEL: model, spans.ERROR: _describe(error)}
        sink.emit(SpanKind.LLM, name, attributes, agent_name=node, start_time=start)

    # -- tool calls ---------------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._active_sink() is None:
            return
        name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        arguments = _detach(inputs) if inputs is not None else input_str
        self._tool_calls[run_id] = (time.time(), _node(metadata), str(name), arguments, kwargs.get("tool_call_id"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_tool(run_id, {spans.TOOL_RESULT: _tool_output(output)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_tool(run_id, {spans.TOOL_ERROR: _describe(error)})

    def _end_tool(self, run_id: UUID, outcome: dict[str, Any]) -> None:
        call = self._tool_calls.pop(run_id, None)
        sink = self._active_sink()
        if call is None or sink is None:
            return
        start, node, name, arguments, call_id = call
        attributes = {
            spans.TOOL_NAME: name,
            spans.TOOL_ARGUMENTS: arguments,
            spans.TOOL_CALL_ID: call_id,
            **outcome,
        }
        sink.emit(SpanKind.TOOL, name, attributes, agent_name=node, start_time=start)


def openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as ``ChatOpenAI`` sends them to chat completions (detached from the caller's).

    Uses langchain-openai's own converter when it is loaded (private, so the request matches the proxy's
    byte for byte), else LangChain's public ``convert_to_openai_messages``."""
    base = sys.modules.get("langchain_openai.chat_models.base")
    convert = getattr(base, "_convert_message_to_dict", None)
    from_v1 = getattr(base, "_convert_from_v1_to_chat_completions", None)
    out: list[dict[str, Any]]
    try:
        if convert is None or from_v1 is None:
            raise LookupError
        out = [convert(from_v1(m)) if isinstance(m, AIMessage) else convert(m) for m in messages]
    except Exception:  # the private converter moved or changed: fall back to the public one
        out = convert_to_openai_messages(list(messages))
    detached: list[dict[str, Any]] = _detach(out)
    return detached


def _node(metadata: dict[str, Any] | None) -> str | None:
    node = (metadata or {}).get("langgraph_node")
    return node if isinstance(node, str) and node else None


def _detach(value: Any) -> Any:
    """A deep copy that the store can serialise (objects JSON doesn't know become their ``str``)."""
    return orjson.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS))


def _tool_output(output: Any) -> Any:
    if isinstance(output, BaseMessage):  # a ToolMessage, when the tool was called with a ToolCall
        output = output.content
    return _detach(output)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
