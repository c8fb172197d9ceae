"""Chat messages between OpenAI's chat format (what tether records) and the OpenTelemetry GenAI conventions'.

The GenAI semantic conventions record messages as JSON in ``gen_ai.input.messages`` / ``gen_ai.output.messages``:
each message is ``{"role", "parts": [...]}`` (output messages add ``finish_reason``), a part is
``{"type": "text", "content"}``, ``{"type": "tool_call", "id", "name", "arguments"}`` or
``{"type": "tool_call_response", "id", "response"}``. ``to_genai`` converts tether's recorded messages for
export; ``from_genai`` converts imported ones back to the chat format tether trains on. Pure functions, no
OpenTelemetry import.
"""

from __future__ import annotations

from typing import Any

from tether import _json


def to_genai(message: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """One OpenAI chat message as a GenAI message; ``finish_reason`` is set on output messages."""
    role = message.get("role") or "user"
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"), "response": _text(message)})
    else:
        parts.extend(_content_parts(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": maybe_json(function.get("arguments")),
                }
            )
    out: dict[str, Any] = {"role": role, "parts": parts}
    if message.get("name"):
        out["name"] = message["name"]
    if finish_reason is not None:
        out["finish_reason"] = finish_reason
    return out


def from_genai(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A GenAI message as OpenAI chat messages (one per tool response: the chat format has one per call)."""
    role = message.get("role") or "user"
    parts = message.get("parts") or []
    texts = [str(p.get("content", "")) for p in parts if p.get("type") == "text"]
    calls = [p for p in parts if p.get("type") == "tool_call"]
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    out: list[dict[str, Any]] = []
    for response in responses:
        value = response.get("response")
        out.append(
            {
                "role": "tool",
                "tool_call_id": response.get("id"),
                "content": value if isinstance(value, str) else _json.dumps(value).decode(),
            }
        )
    if texts or calls or not responses:
        chat: dict[str, Any] = {"role": role}
        if texts or not calls:  # an assistant message that only calls tools has no content
            chat["content"] = "".join(texts)
        if calls:
            chat["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "type": "function",
                    "function": {"name": call.get("name"), "arguments": _as_json_text(call.get("arguments"))},
                }
                for call in calls
            ]
        if message.get("name"):
            chat["name"] = message["name"]
        out.append(chat)
    return out


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        out: list[dict[str, Any]] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append({"type": "text", "content": part.get("text", "")})
            elif isinstance(part, dict):
                out.append(dict(part))
            else:
                out.append({"type": "text", "content": str(part)})
        return out
    return [{"type": "text", "content": str(content)}]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def maybe_json(value: Any) -> Any:
    """``value`` parsed when it is a JSON string (tool-call arguments, attributes holding JSON), else as it is."""
    if isinstance(value, str):
        try:
            return _json.loads(value)
        except ValueError:
            return value
    return value


def _as_json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return _json.dumps({} if value is None else value).decode()
