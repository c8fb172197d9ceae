"""tether's records as OpenTelemetry spans following the GenAI semantic conventions (no OpenTelemetry import).

A rollout is one trace (its id derived from the rollout id); each attempt is a root ``invoke_agent`` span;
each tether span of the attempt is a child: the proxy's and the adapters' LLM calls as ``chat`` spans
(``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``, ``gen_ai.input.messages`` /
``gen_ai.output.messages``, ``gen_ai.agent.name``), tool calls as ``execute_tool`` spans
(``gen_ai.tool.name``, ``gen_ai.tool.call.arguments`` / ``result``), rewards and other spans under
``tether.*`` names. ``attempt_spans`` returns plain ``OTelSpan`` records; ``tether.otel.export`` hands them to
the OpenTelemetry SDK's exporter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether import _json, spans
from tether.otel.messages import to_genai
from tether.types import Attempt, AttemptStatus, Rollout, Span, SpanKind

# -- the conventions' attribute names (gen_ai.* registry) --------------------------------------------------

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_SEED = "gen_ai.request.seed"
REQUEST_STOP = "gen_ai.request.stop_sequences"
REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"

CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
INVOKE_AGENT = "invoke_agent"

#: the provider name tether's spans carry: the calls were answered by tether's proxy
PROVIDER = "tether"

# -- tether's own attributes ------------------------------------------------------------------------------

ROLLOUT_ID = "tether.rollout.id"
TASK_ID = "tether.task.id"
ATTEMPT_ID = "tether.attempt.id"
ATTEMPT_INDEX = "tether.attempt.index"
ATTEMPT_STATUS = "tether.attempt.status"
MODE = "tether.rollout.mode"
REWARD = "tether.reward"
SPAN_ID = "tether.span.id"
SPAN_KIND = "tether.span.kind"
WEIGHTS_VERSION = "tether.weights_version"
REWARD_VALUE = "tether.reward.value"
REWARD_TARGET = "tether.reward.target"  # the sub-agent or policy a reward is for
REWARD_FINAL = "tether.reward.final"  # a reward= mapping's value (recorded after the run)
ATTRIBUTES = "tether.attributes"  # the JSON of a span tether has no convention for


@dataclass(slots=True)
class OTelSpan:
    """One span to export: ids as integers (128-bit trace, 64-bit span), times in nanoseconds."""

    trace_id: int
    span_id: int
    parent_id: int | None
    name: str
    kind: str  # "client" or "internal"
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set: the span's status is ERROR with this description


def trace_id(rollout_id: str) -> int:
    """The 128-bit trace id of a rollout (stable: the same rollout always maps to the same trace)."""
    return int.from_bytes(hashlib.sha256(rollout_id.encode()).digest()[:16], "big") or 1


def span_id(tether_id: str) -> int:
    """The 64-bit span id of a tether id: its 16 hex digits (``sp-…``, ``at-…``), else a hash of it."""
    digits = tether_id.rpartition("-")[2]
    if len(digits) == 16:
        try:
            return int(digits, 16) or 1
        except ValueError:
            pass
    return int.from_bytes(hashlib.sha256(tether_id.encode()).digest()[:8], "big") or 1


def attempt_spans(
    rollout: Rollout, attempt: Attempt, captured: Iterable[Span], *, content: bool = True, last: bool = True
) -> list[OTelSpan]:
    """The OTel spans of one attempt: one per captured span, then the root ``invoke_agent`` span last (as
    live spans end: a receiver that waits for a trace's root then has all of it).

    ``content=False`` leaves out messages, tool arguments and results (the conventions' opt-in content).
    ``last`` says this attempt gave the rollout its outcome (its root carries the rollout's reward).
    """
    items = sorted(captured, key=lambda s: (s.sequence if s.sequence is not None else 0, s.start_time))
    trace = trace_id(rollout.rollout_id)
    root_id = span_id(attempt.attempt_id)
    agent = next((s.agent_name for s in items if s.agent_name), None)
    end = attempt.finished_at or max((s.end_time or s.start_time for s in items), default=attempt.started_at)
    root_attrs: dict[str, Any] = {
        OPERATION_NAME: INVOKE_AGENT,
        PROVIDER_NAME: PROVIDER,
        CONVERSATION_ID: rollout.rollout_id,
        ROLLOUT_ID: rollout.rollout_id,
        TASK_ID: rollout.task_id,
        ATTEMPT_ID: attempt.attempt_id,
        ATTEMPT_INDEX: attempt.index,
        ATTEMPT_STATUS: str(attempt.status),
        MODE: str(rollout.mode),
    }
    if agent:
        root_attrs[AGENT_NAME] = agent
    if last and rollout.reward is not None:
        root_attrs[REWARD] = rollout.reward
    failed = attempt.status not in (AttemptStatus.SUCCEEDED, AttemptStatus.RUNNING)
    root = OTelSpan(
        trace,
        root_id,
        None,
        f"{INVOKE_AGENT} {agent}" if agent else INVOKE_AGENT,
        "internal",
        _ns(attempt.started_at),
        _ns(max(end, attempt.started_at)),
        root_attrs,
        error=(attempt.error or str(attempt.status)) if failed else None,
    )
    out: list[OTelSpan] = []
    if failed:
        root_attrs[ERROR_TYPE] = str(attempt.status)
    known = {s.span_id for s in items}
    for item in items:
        parent = span_id(item.parent_id) if item.parent_id in known and item.parent_id else root_id
        out.append(_child(item, trace, parent, content))
    out.append(root)
    return out


def _child(item: Span, trace: int, parent: int, content: bool) -> OTelSpan:
    start = _ns(item.start_time)
    end = max(_ns(item.end_time or item.start_time), start)
    attrs: dict[str, Any] = {SPAN_ID: item.span_id, SPAN_KIND: str(item.kind)}
    if item.agent_name:
        attrs[AGENT_NAME] = item.agent_name
    error: str | None = None
    if item.kind == SpanKind.LLM:
        name, kind = _llm(item, attrs, content)
        error = _str_or_none(item.attributes.get(spans.ERROR))
    elif item.kind == SpanKind.TOOL:
        name, kind = _tool(item, attrs, content)
        error = _str_or_none(item.attributes.get(spans.TOOL_ERROR))
    elif item.kind == SpanKind.REWARD:
        name, kind = f"tether.reward {item.name}", "internal"
        value = item.attributes.get(spans.REWARD_VALUE)
        if isinstance(value, int | float):
            attrs[REWARD_VALUE] = float(value)
        target = item.attributes.get(spans.REWARD_TARGET)
        if isinstance(target, str):
            attrs[REWARD_TARGET] = target
        if item.attributes.get(spans.REWARD_FINAL):
            attrs[REWARD_FINAL] = True
    else:
        name, kind = item.name, "internal"
        if content:
            attrs[ATTRIBUTES] = _dump(item.attributes)
    if error is not None:
        attrs[ERROR_TYPE] = "tool_error" if item.kind == SpanKind.TOOL else "error"
    return OTelSpan(trace, span_id(item.span_id), parent, name, kind, start, end, attrs, error)


def _llm(item: Span, attrs: dict[str, Any], content: bool) -> tuple[str, str]:
    a = item.attributes
    attrs[OPERATION_NAME] = CHAT
    attrs[PROVIDER_NAME] = PROVIDER
    call = spans.proxy_call(item)
    if call is not None:  # the proxy's span: nested layout (spans.ProxyLLMAttributes)
        params = call.params
        messages, tools = call.messages, call.tools
        model = params.get("model") or call.model
        _put(attrs, RESPONSE_MODEL, call.model)
        _put(attrs, RESPONSE_ID, call.call_id)
        _put(attrs, REQUEST_TEMPERATURE, params.get("temperature"))
        _put(attrs, REQUEST_TOP_P, params.get("top_p"))
        _put(attrs, REQUEST_MAX_TOKENS, params.get("max_tokens"))
        _put(attrs, REQUEST_SEED, params.get("seed"))
        stop = params.get("stop")
        if stop:
            attrs[REQUEST_STOP] = [stop] if isinstance(stop, str) else [str(s) for s in stop]
        if (params.get("n") or 1) > 1:
            attrs[REQUEST_CHOICE_COUNT] = params["n"]
        choices = call.choices
        attrs[RESPONSE_FINISH_REASONS] = [str(c.get("finish_reason") or "") for c in choices]
        usage = call.usage
        _put(attrs, WEIGHTS_VERSION, call.weights_version)
        outputs = [to_genai(c.get("message") or {}, c.get("finish_reason") or "") for c in choices]
    else:  # an adapter's own span of a call: flat keys
        messages = a.get(spans.REQUEST_MESSAGES) or []
        tools = a.get(spans.REQUEST_TOOLS)
        model = a.get(spans.REQUEST_MODEL)
        usage = a.get(spans.USAGE) or {}
        response = a.get(spans.RESPONSE)
        outputs = [to_genai(response, "")] if isinstance(response, dict) else []
    _put(attrs, REQUEST_MODEL, model)
    if isinstance(usage, dict):
        _put(attrs, USAGE_INPUT_TOKENS, usage.get("prompt_tokens", usage.get("input_tokens")))
        _put(attrs, USAGE_OUTPUT_TOKENS, usage.get("completion_tokens", usage.get("output_tokens")))
    if content:
        if isinstance(messages, list):
            attrs[INPUT_MESSAGES] = _dump([to_genai(m) for m in messages if isinstance(m, dict)])
        if outputs:
            attrs[OUTPUT_MESSAGES] = _dump(outputs)
        if tools:
            attrs[TOOL_DEFINITIONS] = _dump(tools)
    return (f"{CHAT} {model}" if model else CHAT), "client"


def _tool(item: Span, attrs: dict[str, Any], content: bool) -> tuple[str, str]:
    a = item.attributes
    name = str(a.get(spans.TOOL_NAME) or item.name)
    attrs[OPERATION_NAME] = EXECUTE_TOOL
    attrs[TOOL_NAME] = name
    attrs[TOOL_TYPE] = "function"
    _put(attrs, TOOL_CALL_ID, a.get(spans.TOOL_CALL_ID))
    if content:
        if spans.TOOL_ARGUMENTS in a:
            attrs[TOOL_CALL_ARGUMENTS] = _text(a[spans.TOOL_ARGUMENTS])
        if spans.TOOL_RESULT in a:
            attrs[TOOL_CALL_RESULT] = _text(a[spans.TOOL_RESULT])
    return f"{EXECUTE_TOOL} {name}", "internal"


def _put(attrs: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` when ``value`` is a primitive OTel accepts (None and containers are left out)."""
    if isinstance(value, str | bool | int | float):
        attrs[key] = value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _dump(value)


def _dump(value: Any) -> str:
    return _json.dumps(_json.jsonable(value)).decode()


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
