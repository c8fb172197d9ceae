"""OpenAI chat-completion streaming: split a finished completion into ``chat.completion.chunk`` SSE events.

The proxy asks backends for whole completions and synthesises the stream a client asked for; the fake LLM
uses the same code. The stream always ends with a usage chunk (no choices) and ``data: [DONE]``, whether or
not the client asked for ``stream_options.include_usage``.
"""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def stream_chunks(completion: dict[str, Any], piece: int = 16) -> list[dict[str, Any]]:
    """The chunks of ``completion``: per choice a role chunk, content and tool-call deltas of ``piece``
    characters, a finish chunk; then one usage chunk."""
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
    }
    chunks: list[dict[str, Any]] = []

    def add(index: int, delta: dict[str, Any], finish: str | None = None) -> None:
        chunks.append(
            {**base, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        )

    for choice in completion["choices"]:
        index = choice["index"]
        message = choice["message"]
        add(index, {"role": "assistant", "content": ""})
        content = message.get("content") or ""
        for start in range(0, len(content), piece):
            add(index, {"content": content[start : start + piece]})
        for k, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            head = {"index": k, "id": call.get("id"), "type": "function"}
            add(index, {"tool_calls": [{**head, "function": {"name": function.get("name"), "arguments": ""}}]})
            arguments = function.get("arguments") or ""
            for start in range(0, len(arguments), piece):
                delta = {"index": k, "function": {"arguments": arguments[start : start + piece]}}
                add(index, {"tool_calls": [delta]})
        add(index, {}, choice.get("finish_reason") or "stop")
    chunks.append({**base, "choices": [], "usage": completion.get("usage")})
    return chunks


def sse_body(completion: dict[str, Any]) -> bytes:
    """The whole event stream of ``completion`` as bytes, ``[DONE]`` included."""
    parts = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in stream_chunks(completion)]
    parts.append(DONE)
    return b"".join(parts)
