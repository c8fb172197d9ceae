"""How an OTLP span's attributes become a tether span's (``tether.otel.ingest``): an LLM span's in the proxy's
layout (``spans.ProxyLLMAttributes``), a tool span's as ``spans.tool_attributes`` gives them, from either the
OpenTelemetry GenAI conventions (OpenLLMetry's indexed prompts included) or OpenInference's."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tether import _json, spans
from tether.otel.messages import from_genai, maybe_json
from tether.otel.otlp import OtlpSpan

# -- LLM calls --------------------------------------------------------------------------------------------


def llm_attributes(s: OtlpSpan, convention: str) -> dict[str, Any]:
    a = s.attributes
    tools: Any
    if convention == "openinference":
        messages = _oi_messages(a, "llm.input_messages")
        outputs = _oi_messages(a, "llm.output_messages")
        schemas = sorted(k for k in a if k.startswith("llm.tools.") and k.endswith(".json_schema"))
        tools = [maybe_json(a[k]) for k in schemas]
        params = maybe_json(a.get("llm.invocation_parameters")) or {}
        model = a.get("llm.model_name")
        usage = {
            "prompt_tokens": a.get("llm.token_count.prompt"),
            "completion_tokens": a.get("llm.token_count.completion"),
        }
        finish: list[Any] = [None] * len(outputs)
    else:
        messages = _genai_messages(a.get("gen_ai.input.messages"))
        system = _genai_parts_text(a.get("gen_ai.system_instructions"))
        if system:
            messages.insert(0, {"role": "system", "content": system})
        raw_out = maybe_json(a.get("gen_ai.output.messages"))
        outputs = _genai_messages(raw_out)
        finish = [m.get("finish_reason") for m in raw_out] if isinstance(raw_out, list) else []
        if not messages and "gen_ai.prompt.0.role" in a:
            messages, outputs = _indexed_messages(a, "gen_ai.prompt"), _indexed_messages(a, "gen_ai.completion")
            finish = [a.get(f"gen_ai.completion.{i}.finish_reason") for i in range(len(outputs))]
        tools = maybe_json(a.get("gen_ai.tool.definitions")) or None
        params = {
            "temperature": a.get("gen_ai.request.temperature"),
            "top_p": a.get("gen_ai.request.top_p"),
            "max_tokens": a.get("gen_ai.request.max_tokens"),
            "seed": a.get("gen_ai.request.seed"),
        }
        model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
        usage = {
            "prompt_tokens": a.get("gen_ai.usage.input_tokens", a.get("gen_ai.usage.prompt_tokens")),
            "completion_tokens": a.get("gen_ai.usage.output_tokens", a.get("gen_ai.usage.completion_tokens")),
        }
    finish = finish + [None] * (len(outputs) - len(finish))
    choices = [
        {
            "message": m,
            "finish_reason": f or ("tool_calls" if m.get("tool_calls") else "stop"),
            "response_token_ids": None,
            "logprobs": None,
        }
        for m, f in zip(outputs, finish, strict=False)
    ]
    request_model = a.get("gen_ai.request.model") or model
    return {
        "call_id": s.span_id,
        "request": {
            "messages": messages,
            "tools": tools or None,
            "params": {
                "model": request_model,
                "temperature": params.get("temperature"),
                "top_p": params.get("top_p"),
                "max_tokens": params.get("max_tokens"),
                "n": None,
                "stop": None,
                "seed": params.get("seed"),
                "stream": False,
            },
        },
        "prompt_token_ids": None,
        "choices": choices,
        "usage": {k: int(v) for k, v in usage.items() if isinstance(v, int | float)},
        "model": model,
        "latency_ms": max(s.end - s.start, 0.0) * 1000,
        "token_ids_available": False,
        spans.WEIGHTS_VERSION: None,
    }


def _genai_messages(value: Any) -> list[dict[str, Any]]:
    data = maybe_json(value)
    if not isinstance(data, list):
        return []
    return [m for item in data if isinstance(item, dict) for m in from_genai(item)]


def _genai_parts_text(value: Any) -> str:
    data = maybe_json(value)
    if isinstance(data, list):
        return "".join(str(p.get("content", "")) for p in data if isinstance(p, dict) and p.get("type") == "text")
    return data if isinstance(data, str) else ""


def _indexed(a: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.0.x``, ``prefix.1.x`` … as a list of ``{x: value}`` dicts (nested keys kept dotted)."""
    found: dict[int, dict[str, Any]] = defaultdict(dict)
    start = prefix + "."
    for key, value in a.items():
        if key.startswith(start):
            index, _, rest = key[len(start) :].partition(".")
            if index.isdigit() and rest:
                found[int(index)][rest] = value
    return [found[i] for i in sorted(found)]


def _indexed_messages(a: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenLLMetry's ``gen_ai.prompt.N.role`` / ``.content`` / ``.tool_calls.M.name`` messages."""
    out = []
    for item in _indexed(a, prefix):
        message: dict[str, Any] = {"role": item.get("role") or "assistant", "content": item.get("content")}
        calls = _indexed(item, "tool_calls")
        if calls:
            message["tool_calls"] = [_call(c.get("id"), c.get("name"), c.get("arguments")) for c in calls]
        if item.get("tool_call_id"):
            message["tool_call_id"] = item["tool_call_id"]
        out.append(message)
    return out


def _oi_messages(a: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's flattened ``llm.input_messages.N.message.*`` as chat messages."""
    out = []
    for item in _indexed(a, prefix):
        message: dict[str, Any] = {"role": item.get("message.role") or "user"}
        content = item.get("message.content")
        if content is None:
            contents = _indexed(item, "message.contents")
            texts = [c.get("message_content.text") for c in contents if c.get("message_content.text") is not None]
            content = "".join(str(t) for t in texts) if texts else None
        message["content"] = content
        calls = _indexed(item, "message.tool_calls")
        if calls:
            message["tool_calls"] = [
                _call(
                    c.get("tool_call.id"), c.get("tool_call.function.name"), c.get("tool_call.function.arguments")
                )
                for c in calls
            ]
        if item.get("message.tool_call_id"):
            message["tool_call_id"] = item["message.tool_call_id"]
        if item.get("message.name"):
            message["name"] = item["message.name"]
        out.append(message)
    return out


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else _json.dumps(arguments or {}).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


# -- tool calls -------------------------------------------------------------------------------------------


def tool_attributes(s: OtlpSpan, convention: str) -> tuple[str, dict[str, Any]]:
    a = s.attributes
    if convention == "openinference":
        name = str(a.get("tool.name") or s.name)
        arguments, result, call_id = a.get("input.value"), a.get("output.value"), a.get("tool_call.id")
    else:
        name = str(a.get("gen_ai.tool.name") or s.name.removeprefix("execute_tool ").strip())
        arguments = a.get("gen_ai.tool.call.arguments")
        result, call_id = a.get("gen_ai.tool.call.result"), a.get("gen_ai.tool.call.id")
    parsed = maybe_json(arguments)
    return name, spans.tool_attributes(
        name,
        parsed if parsed is not None else arguments,
        result=result if s.error is None else None,
        error=s.error,
        call_id=None if call_id is None else str(call_id),
    )
