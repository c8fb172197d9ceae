"""Tool spans for plain functions that call the openai client, read from the requests they send.

A plain function runs its tools itself, out of tether's sight; what tether does see is the next chat request,
whose ``role="tool"`` messages carry each tool's result, answering an earlier assistant message's
``tool_calls`` (name and arguments) — or, on the Responses API, the next request's ``function_call_output``
items, answering its ``function_call`` items. ``ToolResultTracker`` listens to the redirected requests of
runs started by ``OpenAIFunctionAdapter.run`` and emits one ``tool`` span per tool result the first time a
request carries it: ``tool.name``, ``tool.arguments`` (parsed JSON when it parses), ``tool.call_id``,
``tool.result``, with the sub-agent of that request. Limits, inherent to this layer: a tool whose result is
never sent back to the model is not seen, and a tool error is only whatever text the function put in the tool
message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from tether import spans
from tether.capture.context import RolloutScope, current_agent_name
from tether.plugin.adapters import SpanSink, tool_arguments
from tether.types import SpanKind

#: The tool-call ids already reported in the current run (a fresh set per ``OpenAIFunctionAdapter.run``;
#: worker threads started with ``asyncio.to_thread`` see the same set through the copied context).
_reported: ContextVar[set[str] | None] = ContextVar("tether_openai_reported_tools", default=None)


@contextmanager
def tracking_run() -> Iterator[None]:
    """Mark the current context as one run of a plain function whose tool results are to be reported."""
    token = _reported.set(set())
    try:
        yield
    finally:
        _reported.reset(token)


class ToolResultTracker:
    """A ``tether.capture.redirect`` listener that turns newly seen tool results into ``tool`` spans on
    ``sink``."""

    def __init__(self) -> None:
        self.sink: SpanSink | None = None

    def __call__(self, body: Any, scope: RolloutScope, call_id: str) -> None:
        reported = _reported.get()
        sink = self.sink
        if reported is None or sink is None or not isinstance(body, Mapping):
            return
        items = body.get("messages")
        if not isinstance(items, list):
            items = body.get("input")  # the Responses API: function_call and function_call_output items
            if not isinstance(items, list):
                return
        calls: dict[str, tuple[str, Any]] = {}
        agent = current_agent_name()
        for item in items:
            if not isinstance(item, Mapping):
                continue
            made = _calls(item)
            if made:
                calls.update(made)
                continue
            result = _result(item)
            if result is None or result[0] in reported:
                continue
            call_key, content = result
            reported.add(call_key)
            name, arguments = calls.get(call_key, (str(item.get("name") or "unknown"), None))
            sink.emit(
                SpanKind.TOOL,
                name,
                {
                    spans.TOOL_NAME: name,
                    spans.TOOL_ARGUMENTS: arguments,
                    spans.TOOL_CALL_ID: call_key,
                    spans.TOOL_RESULT: _content(content),
                    spans.LLM_CALL_ID: call_id,  # the request that carried the result back
                },
                agent_name=agent,
            )


def _calls(item: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Call id -> (tool name, arguments) of the tool calls an item makes: an assistant message's ``tool_calls``
    or a Responses ``function_call`` item."""
    if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
        return {item["call_id"]: (str(item.get("name")), tool_arguments(item.get("arguments")))}
    found = {}
    if item.get("role") == "assistant":
        for call in item.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping) and isinstance(call.get("id"), str):
                found[call["id"]] = (str(function.get("name")), tool_arguments(function.get("arguments")))
    return found


def _result(item: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(call id, result) of the tool result an item carries: a ``tool`` message or a ``function_call_output``."""
    if item.get("role") == "tool" and isinstance(item.get("tool_call_id"), str):
        return item["tool_call_id"], item.get("content")
    if item.get("type") == "function_call_output" and isinstance(item.get("call_id"), str):
        return item["call_id"], item.get("output")
    return None


def _content(content: Any) -> Any:
    if isinstance(content, list):  # content parts: keep the text
        texts = [str(p["text"]) for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(texts) if texts else content
    return content
