"""OpenAI's Responses API (``POST /v1/responses``) served as a translation of the Chat Completions call it becomes.

An agent written for the Responses API (the openai SDK's ``client.responses.create``, the Agents SDK's default
model, LangChain's ``use_responses_api=True``) reaches the same backends through the proxy, and is recorded as the
same ``llm`` span and transition, token ids and sub-agent name included: ``chat_body`` turns the request into a
chat-completions body (the proxy validates and records that body; ``read_call`` reads either kind of call),
and ``response_object`` turns the ``chat.completion`` the backend's answer becomes into a ``response`` object
(``tether.proxy.responses_stream`` streams it as the API's semantic events).

What translates:

- ``input``: a string (one user message) or a list of items: messages (``system``, ``developer``, ``user``,
  ``assistant``; content a string or ``input_text`` / ``output_text`` / ``refusal`` / ``input_image`` parts),
  ``function_call`` items (an assistant message's ``tool_calls``; consecutive calls join one message) and
  ``function_call_output`` items (``tool`` messages); ``reasoning`` items are dropped (no backend reads them);
- ``instructions``: a system message before the input;
- ``tools``: function tools (``{"type": "function", "name", "description", "parameters", "strict"}``);
  ``tool_choice``, ``parallel_tool_calls``, ``max_output_tokens``, ``temperature``, ``top_p`` and
  ``text.format`` (as ``response_format``) carry over.

The proxy keeps no responses, so what needs a stored one is refused with a 400 naming the fix:
``previous_response_id``, ``conversation``, ``item_reference`` items and ``background``; send the whole
conversation as ``input`` items instead (what ``store=False`` clients do). Built-in tools (web search, file
search, ...) and file inputs are refused the same way.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from tether.models.base import ChatRequest
from tether.proxy._http_server import Response
from tether.proxy.request import InvalidRequest, parse_chat_request
from tether.proxy.responses_stream import sse_body

#: request keys that need a response stored by the server: refused, with the fix
_STATEFUL = {
    "previous_response_id": "the proxy does not store responses, so it cannot continue one",
    "conversation": "the proxy does not store conversations",
    "background": "the proxy answers in the foreground only",
}
_SEND_INPUT = "send the whole conversation as `input` items instead (as with store=False)"
#: request keys copied into the chat body as they are (the chat API takes them under the same name)
_SAME = ("model", "temperature", "top_p", "stream", "tool_choice", "parallel_tool_calls", "seed")
_MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


def read_call(raw: bytes, responses: bool) -> tuple[Any, bytes, ChatRequest, bool]:
    """A call's request as sent, the bytes of the chat body the backend is asked (a Responses API call's
    translation when ``responses``), its ``ChatRequest`` and whether it streams; ``InvalidRequest`` for a
    request that is not one."""
    try:
        asked = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON ({exc})") from None
    body = asked
    if responses:
        body = chat_body(asked)
        raw = orjson.dumps(body)
    chat, stream = parse_chat_request(body)
    return asked, raw, chat, stream


def chat_body(body: Any) -> dict[str, Any]:
    """The chat-completions request body that answers the Responses API request ``body``; ``InvalidRequest``
    naming the parameter for what cannot be translated."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got {_kind(body)}")
    for key, why in _STATEFUL.items():
        if body.get(key) not in (None, False):
            raise InvalidRequest(f"'{key}' is not supported: {why}; {_SEND_INPUT}", key)
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest(f"'instructions' must be a string, got {_kind(instructions)}", "instructions")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    messages.extend(_messages(body.get("input")))
    chat: dict[str, Any] = {"messages": messages}
    for key in _SAME:
        if key in body:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    tools = body.get("tools")
    if tools:
        chat["tools"] = _tools(tools)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        chat["tool_choice"] = _tool_choice(choice)
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    return chat


def _messages(given: Any) -> list[dict[str, Any]]:
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    if not isinstance(given, list) or not given:
        raise InvalidRequest(
            f"'input' must be a string or a non-empty list of input items, got {_kind(given)}", "input"
        )
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(given):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"{where} must be an object (a message or an item), got {_kind(item)}", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in _MESSAGE_ROLES:
                raise InvalidRequest(
                    f"{where}.role must be one of {sorted(_MESSAGE_ROLES)}, got {role!r}", f"{where}.role"
                )
            messages.append({"role": role, "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", where),
                "type": "function",
                "function": {"name": _string(item, "name", where), "arguments": _arguments(item, where)},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and _joinable(last):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content(output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": text})
        elif kind == "reasoning":
            continue  # a reasoning model's summary: no backend here reads it back
        elif kind == "item_reference":
            raise InvalidRequest(f"{where}: an item_reference needs stored responses; {_SEND_INPUT}", where)
        else:
            raise InvalidRequest(
                f"{where}.type {kind!r} is not served: the proxy takes message, function_call, "
                "function_call_output and reasoning items",
                f"{where}.type",
            )
    return messages


def _joinable(message: dict[str, Any]) -> bool:
    """Whether a function call may join this assistant message: one of calls, or a text reply right before."""
    return isinstance(message.get("content"), str | None)


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """Message content in the chat API's form: a string when every part is text, else chat content parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(f"{where} must be a string or a list of content parts, got {_kind(content)}", where)
    parts: list[dict[str, Any]] = []
    for k, part in enumerate(content):
        converted = _part(part) if isinstance(part, dict) else None
        if converted is None:
            kind = part.get("type") if isinstance(part, dict) else _kind(part)
            raise InvalidRequest(
                f"{where}[{k}] must be an input_text, output_text, refusal or input_image (by URL) part, got "
                f"{kind!r}",
                f"{where}[{k}]",
            )
        parts.append(converted)
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _part(part: dict[str, Any]) -> dict[str, Any] | None:
    """A Responses content part as a chat content part; None for one the proxy cannot pass on."""
    kind = part.get("type")
    if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    return None


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise InvalidRequest(f"'tools' must be a list of tool definitions, got {_kind(tools)}", "tools")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or kind != "function":
            raise InvalidRequest(
                f"{at}: only function tools are served (type 'function'), got {kind if kind else _kind(tool)!r}; "
                "built-in tools (web search, file search, ...) run on OpenAI's servers",
                at,
            )
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: dict[str, Any]) -> dict[str, Any]:
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequest(
        "'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'name': ...}", "tool_choice"
    )


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidRequest(f"text.format.type {fmt.get('type')!r} is not one of text, json_object, json_schema")


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{where}.{key} must be a non-empty string", f"{where}.{key}")
    return value


def _arguments(item: dict[str, Any], where: str) -> str:
    value = item.get("arguments", "")
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}.arguments must be a JSON string, got {_kind(value)}", f"{where}.arguments")
    return value


# -- the answer ---------------------------------------------------------------------------------------------


def answer(asked: dict[str, Any], completion: dict[str, Any], call_id: str, stream: bool) -> Response:
    """The proxy's answer to the Responses API request ``asked``: its response object, or that object's event
    stream when ``stream``."""
    response = response_object(asked, completion, call_id)
    if stream:
        return Response(
            sse_body(response), content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    return Response(orjson.dumps(response))


def response_object(asked: dict[str, Any], completion: dict[str, Any], response_id: str) -> dict[str, Any]:
    """The ``response`` object answering ``asked`` (the Responses API request) from ``completion`` (the
    ``chat.completion`` of its translated call): its first choice's text and tool calls as output items."""
    choice = completion["choices"][0]
    message = choice["message"]
    cut = choice.get("finish_reason") == "length"
    status = "incomplete" if cut else "completed"
    output: list[dict[str, Any]] = []
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if content or not calls:
        text = content if isinstance(content, str) else ""
        output.append(
            {
                "type": "message",
                "id": f"msg_{response_id}",
                "status": status,
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }
        )
    for k, call in enumerate(calls):
        function = call.get("function") or {}
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{response_id}_{k}",
                "call_id": call.get("id") or f"call_{response_id}_{k}",
                "name": function.get("name") or "",
                "arguments": function.get("arguments") or "",
                "status": status,
            }
        )
    usage = completion.get("usage") or {}
    prompt_tokens, completion_tokens = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {
        **_echo(asked, response_id, completion["model"], completion["created"]),
        "status": status,
        "completed_at": None if cut else time.time(),
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": output,
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": int(usage.get("total_tokens", prompt_tokens + completion_tokens)),
        },
    }


def _echo(asked: dict[str, Any], response_id: str, model: Any, created: int) -> dict[str, Any]:
    """The fields of a response that repeat its request."""
    text = asked.get("text") if isinstance(asked.get("text"), dict) else None
    return {
        "id": f"resp_{response_id}",
        "object": "response",
        "created_at": created,
        "model": model or asked.get("model") or "",
        "error": None,
        "instructions": asked.get("instructions"),
        "max_output_tokens": asked.get("max_output_tokens"),
        "metadata": asked.get("metadata") or {},
        "parallel_tool_calls": asked.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "store": False,
        "temperature": asked.get("temperature"),
        "text": text or {"format": {"type": "text"}},
        "tool_choice": asked.get("tool_choice") or "auto",
        "tools": asked.get("tools") or [],
        "top_p": asked.get("top_p"),
        "truncation": "disabled",
        "user": asked.get("user"),
    }


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
