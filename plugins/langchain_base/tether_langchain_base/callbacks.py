"""The LangChain callback capture the ``langchain`` and ``langgraph`` plugins share: model and tool calls as spans.

``CallbackCapture`` is a mixin for a LangChain ``BaseCallbackHandler`` subclass, written in front of it
(``class Handler(CallbackCapture, BaseCallbackHandler)``): it implements the events and leaves only the naming to
the plugin (``_model_agent``, ``_tool_agent``, and ``_run_started`` / ``_run_ended`` for a plugin that follows
LangChain's run tree). It runs inline (``run_inline``), in the context of the run that fired the event, so the
sink sees the current rollout; events outside any rollout are ignored before any work is done. Spans:

- ``llm`` (one per chat-model call): ``request.messages`` as the OpenAI chat completions API receives them
  (``openai_messages``, deep-copied), ``request.model``, and ``response`` (the assistant message) or ``error``.
  The proxy's span of the same call is the one with token ids and the agent name (from the request header);
  this one is for inspection.
- ``tool``: ``tool.name``, ``tool.arguments``, ``tool.call_id`` and ``tool.result`` or ``tool.error``.
  LangChain fires ``on_tool_error`` even when a tool node turns the exception into a ``ToolMessage`` and the run
  carries on, so an error span does not mean the rollout failed. Each tool run yields at most one span.
- ``other`` named ``root_span`` (``"chain"``, ``"graph"``) with ``<root_span>.name``: the name of each root run
  (the runnable being invoked).

In the shared base so that neither plugin imports the other; it imports LangChain only inside the events, which
LangChain alone fires.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, ClassVar
from uuid import UUID

from tether import spans
from tether.capture.context import current_scope
from tether.plugin.adapters import SpanSink, json_safe
from tether.types import SpanKind


class CallbackCapture:
    """Sends LangChain events to ``sink`` while it is set and a rollout runs; inert when ``sink`` is None."""

    run_inline = True
    raise_error = False
    #: the name of the ``other`` span of each root run; its attribute is ``<root_span>.name``
    root_span: ClassVar[str] = "chain"

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
        self._forget()

    def _active_sink(self) -> SpanSink | None:
        return self.sink if current_scope.get() is not None else None

    # -- naming, for the plugin ---------------------------------------------------------------------------

    def _model_agent(self, parent_run_id: UUID | None, name: str, metadata: dict[str, Any] | None) -> str | None:
        """The sub-agent of a chat-model call (run ``name``, inside ``parent_run_id``). Default: none."""
        return None

    def _tool_agent(self, parent_run_id: UUID | None, metadata: dict[str, Any] | None) -> str | None:
        """The sub-agent that called a tool (inside ``parent_run_id``). Default: none."""
        return None

    def _run_started(
        self, run_id: UUID, parent_run_id: UUID | None, name: str, metadata: dict[str, Any] | None
    ) -> None:
        """A chain or tool run began (inside a rollout). Default: nothing."""

    def _run_ended(self, run_id: UUID) -> None:
        """A chain or tool run ended. Default: nothing."""

    def _forget(self) -> None:
        """Forget the runs still open (``detach``). Default: nothing."""

    # -- runs ---------------------------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        sink = self._active_sink()
        if sink is None:
            return
        name = str(kwargs.get("name") or (serialized or {}).get("name") or self.root_span)
        self._run_started(run_id, parent_run_id, name, metadata)
        if parent_run_id is None:
            sink.emit(SpanKind.OTHER, self.root_span, {f"{self.root_span}.name": name})

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._run_ended(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._run_ended(run_id)

    # -- model calls --------------------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._active_sink() is None or not messages:
            return
        params = kwargs.get("invocation_params") or {}
        model = params.get("model") or params.get("model_name")
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "chat_model")
        agent = self._model_agent(parent_run_id, name, metadata)
        self._llm_calls[run_id] = (time.time(), agent, name, openai_messages(messages[0]), model)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        from langchain_core.messages import BaseMessage

        call = self._llm_calls.pop(run_id, None)
        sink = self._active_sink()
        if call is None or sink is None:
            return
        start, agent, name, request, model = call
        generations = getattr(response, "generations", None) or [[]]
        first = generations[0][0] if generations[0] else None
        message = getattr(first, "message", None)
        reply = openai_messages([message])[0] if isinstance(message, BaseMessage) else None
        attributes = {spans.REQUEST_MESSAGES: request, spans.REQUEST_MODEL: model, spans.RESPONSE: reply}
        sink.emit(SpanKind.LLM, name, attributes, agent_name=agent, start_time=start)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._llm_calls.pop(run_id, None)
        sink = self._active_sink()
        if call is None or sink is None:
            return
        start, agent, name, request, model = call
        attributes = {spans.REQUEST_MESSAGES: request, spans.REQUEST_MODEL: model, spans.ERROR: _describe(error)}
        sink.emit(SpanKind.LLM, name, attributes, agent_name=agent, start_time=start)

    # -- tool calls ---------------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._active_sink() is None:
            return
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        caller = self._tool_agent(parent_run_id, metadata)
        self._run_started(run_id, parent_run_id, name, metadata)  # a sub-agent run inside the tool is its own
        arguments = json_safe(inputs) if inputs is not None else input_str
        self._tool_calls[run_id] = (time.time(), caller, name, arguments, kwargs.get("tool_call_id"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_tool(run_id, {spans.TOOL_RESULT: _tool_output(output)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end_tool(run_id, {spans.TOOL_ERROR: _describe(error)})

    def _end_tool(self, run_id: UUID, outcome: dict[str, Any]) -> None:
        self._run_ended(run_id)
        call = self._tool_calls.pop(run_id, None)
        sink = self._active_sink()
        if call is None or sink is None:
            return
        start, agent, name, arguments, call_id = call
        attributes = {
            spans.TOOL_NAME: name,
            spans.TOOL_ARGUMENTS: arguments,
            spans.TOOL_CALL_ID: call_id,
            **outcome,
        }
        sink.emit(SpanKind.TOOL, name, attributes, agent_name=agent, start_time=start)


def openai_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """LangChain messages as ``ChatOpenAI`` sends them to chat completions (detached from the caller's).

    Uses langchain-openai's own converter when it is loaded (private, so the request matches the proxy's
    byte for byte), else LangChain's public ``convert_to_openai_messages``."""
    from langchain_core.messages import AIMessage, convert_to_openai_messages

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
    detached: list[dict[str, Any]] = json_safe(out)
    return detached


def _tool_output(output: Any) -> Any:
    from langchain_core.messages import BaseMessage

    if isinstance(output, BaseMessage):  # a ToolMessage, when the tool was called with a ToolCall
        output = output.content
    return json_safe(output)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
