"""Turns the attributes of an AgentOps OpenTelemetry span into a tether span: kind, name, payload, agent name.

Pure functions over plain values (no OpenTelemetry import), so they are cheap to test on their own. AgentOps
marks its decorated spans with ``agentops.span.kind`` (``agent``, ``tool``, ``task``, ``operation``, …) and
names them with ``operation.name``; its LLM instrumentation writes the request and the response flattened
into ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*`` keys, which are folded back into OpenAI-style
messages here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether import spans
from tether.types import SpanKind

KIND_ATTR = "agentops.span.kind"
NAME_ATTR = "operation.name"
ENTITY_NAME_ATTR = "agentops.entity.name"
AGENT_NAME_ATTR = "agent.name"

# AgentOps' own keys, read from its spans. Some are spelled like tether's (``tether.spans``) but belong to
# AgentOps' schema, so they are named here, apart from the keys of the tether spans written below.
_AO_TOOL_NAME = "tool.name"
_AO_TOOL_PARAMETERS = "tool.parameters"  # a tool call's arguments (not its schema, as in tether's)
_AO_TOOL_RESULT = "tool.result"
_AO_TOOL_CALL_ID = "tool.call.id"
_AO_TOOL_CALL_TYPE = "tool.call.type"
_AO_TOOL_INPUT = "agentops.tool.input"
_AO_TOOL_OUTPUT = "agentops.tool.output"
_AO_MODEL = "gen_ai.request.model"
_AO_SYSTEM = "gen_ai.system"  # copied as is onto the tether span

_PROMPT = "gen_ai.prompt."
_COMPLETION = "gen_ai.completion."
_USAGE = {
    "gen_ai.usage.prompt_tokens": "prompt_tokens",
    "gen_ai.usage.completion_tokens": "completion_tokens",
    "gen_ai.usage.total_tokens": "total_tokens",
}
_INDEXED = re.compile(r"^(\d+)\.(.+)$")


@dataclass(slots=True)
class Converted:
    kind: SpanKind
    name: str
    attributes: dict[str, Any] = field(default_factory=dict)


def plain(value: Any) -> Any:
    """An OpenTelemetry attribute value as JSON-ready data (sequences arrive as tuples)."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def kind_of(attrs: Mapping[str, Any]) -> str | None:
    """AgentOps' own kind of a span (``agent``, ``tool``, ``llm``, …); some instrumentations write the enum's
    repr (``AgentOpsSpanKindValues.TOOL``) instead of its value."""
    value = attrs.get(KIND_ATTR)
    return str(value).rsplit(".", 1)[-1].lower() if value is not None else None


def is_llm(attrs: Mapping[str, Any]) -> bool:
    if kind_of(attrs) == "llm":
        return True
    return _AO_MODEL in attrs or _AO_SYSTEM in attrs or any(k.startswith(_PROMPT) for k in attrs)


def is_tool(attrs: Mapping[str, Any]) -> bool:
    return kind_of(attrs) == "tool" or _AO_TOOL_NAME in attrs


def is_tool_call_request(attrs: Mapping[str, Any]) -> bool:
    """A span AgentOps' LLM instrumentation opens under a model call for each tool call the model *asked
    for* (``tool.call.id``, no result): part of that call's response, not a tool execution."""
    return is_tool(attrs) and _AO_TOOL_CALL_ID in attrs and _AO_TOOL_RESULT not in attrs


def tool_call_of(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI-style tool call a tool-call request span describes."""
    return _tool_call(
        {
            "id": attrs.get(_AO_TOOL_CALL_ID),
            "type": attrs.get(_AO_TOOL_CALL_TYPE, "function"),
            "name": attrs.get(_AO_TOOL_NAME),
            "arguments": attrs.get(_AO_TOOL_PARAMETERS),
        }
    )


def agent_name_of(span_name: str, attrs: Mapping[str, Any]) -> str | None:
    """The agent this span names itself: its ``agent.name``, or the name of an AgentOps ``agent`` span."""
    own = attrs.get(AGENT_NAME_ATTR)
    if isinstance(own, str) and own:
        return own
    if kind_of(attrs) == "agent":
        return _entity_name(span_name, attrs, suffix=".agent")
    return None


def convert(
    span_name: str, attrs: Mapping[str, Any], error: str | None, tool_calls: list[dict[str, Any]] | None = None
) -> Converted:
    """The tether span for an ended AgentOps span (``error``: its failure, if its status is ERROR;
    ``tool_calls``: for an LLM span, the tool calls its request spans described)."""
    if is_llm(attrs):
        out = Converted(SpanKind.LLM, span_name, _llm_attributes(attrs, tool_calls or []))
    elif is_tool(attrs):
        out = Converted(SpanKind.TOOL, _entity_name(span_name, attrs, suffix=".tool"), _tool_attributes(attrs))
    else:
        out = Converted(SpanKind.OTHER, span_name, {k: plain(v) for k, v in attrs.items()})
    if error is not None:
        out.attributes[spans.TOOL_ERROR if out.kind == SpanKind.TOOL else spans.ERROR] = error
    return out


def _entity_name(span_name: str, attrs: Mapping[str, Any], *, suffix: str) -> str:
    for key in (
        (_AO_TOOL_NAME, NAME_ATTR, ENTITY_NAME_ATTR) if suffix == ".tool" else (NAME_ATTR, ENTITY_NAME_ATTR)
    ):
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return span_name.removesuffix(suffix)


def _llm_attributes(attrs: Mapping[str, Any], tool_calls: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    messages = _messages(attrs, _PROMPT)
    if messages:
        out[spans.REQUEST_MESSAGES] = messages
    model = attrs.get(_AO_MODEL)
    if model is not None:
        out[spans.REQUEST_MODEL] = model
    completions = _messages(attrs, _COMPLETION)
    if completions:
        out[spans.RESPONSE] = completions[0]
    if tool_calls and not out.get(spans.RESPONSE, {}).get("tool_calls"):
        out.setdefault(spans.RESPONSE, {"role": "assistant"})["tool_calls"] = tool_calls
    usage = {short: attrs[key] for key, short in _USAGE.items() if key in attrs}
    if usage:
        out[spans.USAGE] = usage
    system = attrs.get(_AO_SYSTEM)
    if system is not None:
        out[_AO_SYSTEM] = system
    return out


def _messages(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``gen_ai.prompt.0.role``, ``gen_ai.prompt.0.tool_calls.1.name``, … folded into message dicts."""
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        match = _INDEXED.match(key[len(prefix) :])
        if match is None:
            continue
        fields.setdefault(int(match.group(1)), {})[match.group(2)] = plain(value)
    return [_message(fields[i]) for i in sorted(fields)]


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {}
    if "role" in flat:
        message["role"] = flat["role"]
    if "content" in flat:
        message["content"] = flat["content"]
    calls: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        match = _INDEXED.match(key.removeprefix("tool_calls.")) if key.startswith("tool_calls.") else None
        if match is not None:
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    if calls:
        message["tool_calls"] = [_tool_call(calls[j]) for j in sorted(calls)]
    for key in ("tool_call_id", "name", "finish_reason"):
        if key in flat:
            message[key] = flat[key]
    return message


def _tool_call(flat: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = {}
    if "id" in flat:
        call["id"] = flat["id"]
    call["type"] = flat.get("type", "function")
    call["function"] = {"name": flat.get("name"), "arguments": flat.get("arguments")}
    return call


def _tool_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {spans.TOOL_NAME: _entity_name("", attrs, suffix=".tool")}
    if _AO_TOOL_PARAMETERS in attrs:
        out[spans.TOOL_ARGUMENTS] = _arguments(attrs[_AO_TOOL_PARAMETERS])
    elif _AO_TOOL_INPUT in attrs:
        out[spans.TOOL_ARGUMENTS] = _arguments(attrs[_AO_TOOL_INPUT])
    for key in (_AO_TOOL_RESULT, _AO_TOOL_OUTPUT):
        if key in attrs:
            out[spans.TOOL_RESULT] = plain(attrs[key])
            break
    return out


def _arguments(raw: Any) -> Any:
    """AgentOps records a decorated tool's call as JSON ``{"args": [...], "kwargs": {...}}``: keyword-only calls
    become their keyword dict; anything else is kept as recorded."""
    value = plain(raw)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, dict) and set(value) == {"args", "kwargs"} and not value["args"]:
        return value["kwargs"]
    return value
