"""Validate an OpenAI chat-completions request body and turn it into a backend ``ChatRequest``.

Every rejection is an ``InvalidRequest`` naming the offending parameter and what would be accepted, so the
proxy can answer with an OpenAI-style 400 body the client's SDK shows as-is.
"""

from __future__ import annotations

import math
from typing import Any

from tether.models.base import ChatRequest

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: parameters read into ChatRequest fields (or handled by the proxy); anything else goes to ``extra``
_HANDLED = frozenset(
    {
        "messages",
        "tools",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "model",
        "stream",
        "stream_options",
    }
)
MAX_N = 128
MAX_TOKENS = 2**31 - 1  # what a 32-bit signed int holds: the backends' limit


class InvalidRequest(ValueError):
    """A malformed request; ``param`` names the offending parameter (OpenAI's error ``param``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_chat_request(body: Any) -> tuple[ChatRequest, bool]:
    """The ``ChatRequest`` for ``body`` and whether the client asked for a stream."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got {_kind(body)}")
    messages = _check_messages(body.get("messages"))
    tools = body.get("tools")
    if tools is not None:
        _check_tools(tools)
    n = body.get("n")
    n = 1 if n is None else _int(n, "n", 1, MAX_N)
    max_tokens = _max_tokens(body)
    temperature = _number(body.get("temperature"), "temperature", 0.0, 2.0, default=1.0)
    top_p = _number(body.get("top_p"), "top_p", 0.0, 1.0, default=1.0)
    seed = body.get("seed")
    if seed is not None:
        seed = _int(seed, "seed", -(2**63), 2**63 - 1)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest(f"'model' must be a string, got {_kind(model)}", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest(f"'stream' must be true or false, got {stream!r}", "stream")
    extra = {k: v for k, v in body.items() if k not in _HANDLED}
    request = ChatRequest(
        messages=messages,
        tools=tools or None,
        n=n,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop=_stop(body.get("stop")),
        seed=seed,
        model=model,
        extra=extra,
    )
    return request, stream


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` itself, once checked to be a non-empty list of well-formed messages."""
    if messages is None:
        raise InvalidRequest("'messages' is required: a list of {'role': ..., 'content': ...} objects", "messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(f"'messages' must be a non-empty list of messages, got {_kind(messages)}", "messages")
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequest(
                f"{where} must be an object with 'role' and 'content', got {_kind(message)}", where
            )
        role = message.get("role")
        if role not in _ROLES:
            raise InvalidRequest(f"{where}.role must be one of {sorted(_ROLES)}, got {role!r}", f"{where}.role")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise InvalidRequest(
                f"{where}.content must be a string, a list of content parts or null, got {_kind(content)}",
                f"{where}.content",
            )
        if content is None and role in ("system", "developer", "user"):
            raise InvalidRequest(f"{where}.content is required for a {role} message", f"{where}.content")
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise InvalidRequest(
                f"{where}: a tool message needs 'tool_call_id' (the id of the call it answers)",
                f"{where}.tool_call_id",
            )
        calls = message.get("tool_calls")
        if calls is not None:
            _check_tool_calls(calls, where)
    return messages


def _check_tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise InvalidRequest(f"{where}.tool_calls must be a list, got {_kind(calls)}", f"{where}.tool_calls")
    for k, call in enumerate(calls):
        at = f"{where}.tool_calls[{k}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest(
                f"{at} must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}", at
            )
        if not isinstance(function.get("arguments", ""), str):
            raise InvalidRequest(
                f"{at}.function.arguments must be a JSON string, got {_kind(function['arguments'])}",
                f"{at}.function.arguments",
            )


def _check_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise InvalidRequest(f"'tools' must be a list of tool definitions, got {_kind(tools)}", "tools")
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type", "function") != "function"
            or not isinstance(function, dict)
        ):
            raise InvalidRequest(f"{at} must be {{'type': 'function', 'function': {{'name', 'parameters'}}}}", at)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"{at}.function.name must be a non-empty string", f"{at}.function.name")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise InvalidRequest(
                f"{at}.function.parameters must be a JSON Schema object, got {_kind(parameters)}",
                f"{at}.function.parameters",
            )


def _max_tokens(body: dict[str, Any]) -> int | None:
    legacy = body.get("max_tokens")
    modern = body.get("max_completion_tokens")
    if legacy is not None:
        legacy = _int(legacy, "max_tokens", 1, MAX_TOKENS)
    if modern is not None:
        modern = _int(modern, "max_completion_tokens", 1, MAX_TOKENS)
    if legacy is not None and modern is not None and legacy != modern:
        raise InvalidRequest(
            f"'max_tokens' ({legacy}) and 'max_completion_tokens' ({modern}) disagree: send only one",
            "max_completion_tokens",
        )
    return modern if modern is not None else legacy


def _stop(stop: Any) -> list[str] | None:
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop] if stop else None
    if isinstance(stop, list) and all(isinstance(s, str) and s for s in stop):
        return list(stop) or None
    raise InvalidRequest(f"'stop' must be a non-empty string or a list of them, got {stop!r}", "stop")


def _int(value: Any, name: str, low: int, high: int) -> int:
    number: int
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        raise InvalidRequest(f"'{name}' must be an integer, got {value!r}", name)
    if not low <= number <= high:
        raise InvalidRequest(f"'{name}' must be between {low} and {high}, got {number}", name)
    return number


def _number(value: Any, name: str, low: float, high: float, *, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequest(f"'{name}' must be a number, got {value!r}", name)
    if not low <= value <= high:
        raise InvalidRequest(f"'{name}' must be between {low:g} and {high:g}, got {value}", name)
    return float(value)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
