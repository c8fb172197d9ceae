"""The Responses API's streaming: a finished ``response`` object told as the API's semantic SSE events.

As with chat completions (``tether.proxy.sse``), the proxy has the whole answer before it streams, and
synthesises what a client asked for: ``response.created`` and ``response.in_progress`` (the response without
output), then per output item ``response.output_item.added``, its deltas (``response.output_text.delta`` of a
message's text in a ``response.content_part`` pair, ``response.function_call_arguments.delta`` of a call's
arguments) and their ``.done`` events, ``response.output_item.done``; and last ``response.completed`` (or
``response.incomplete`` when the answer was cut at ``max_output_tokens``) with the whole response. Each event is
``event: <type>`` and ``data: <json>`` with a rising ``sequence_number``; no ``[DONE]`` follows, as in the API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

#: characters of text or arguments per delta event
PIECE = 16


def events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that stream ``response``, numbered."""
    out = list(_events(response))
    for number, event in enumerate(out):
        event["sequence_number"] = number
    return out


def sse_body(response: dict[str, Any]) -> bytes:
    """The whole event stream of ``response`` as bytes."""
    return b"".join(
        b"event: " + event["type"].encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"
        for event in events(response)
    )


def _events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    opening = {**response, "status": "in_progress", "output": [], "usage": None, "completed_at": None}
    opening["incomplete_details"] = None
    yield {"type": "response.created", "response": opening}
    yield {"type": "response.in_progress", "response": opening}
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            yield from _message(index, item)
        else:
            yield from _function_call(index, item)
    done = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield {"type": done, "response": response}


def _message(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    yield {
        "type": "response.output_item.added",
        "output_index": index,
        "item": {**item, "status": "in_progress", "content": []},
    }
    for content_index, part in enumerate(item["content"]):
        at = {**where, "content_index": content_index}
        yield {"type": "response.content_part.added", **at, "part": {**part, "text": ""}}
        text = part["text"]
        for start in range(0, len(text), PIECE):
            yield {
                "type": "response.output_text.delta",
                **at,
                "delta": text[start : start + PIECE],
                "logprobs": [],
            }
        yield {"type": "response.output_text.done", **at, "text": text, "logprobs": []}
        yield {"type": "response.content_part.done", **at, "part": part}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _function_call(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    yield {
        "type": "response.output_item.added",
        "output_index": index,
        "item": {**item, "status": "in_progress", "arguments": ""},
    }
    arguments = item["arguments"]
    for start in range(0, len(arguments), PIECE):
        yield {
            "type": "response.function_call_arguments.delta",
            **where,
            "delta": arguments[start : start + PIECE],
        }
    yield {"type": "response.function_call_arguments.done", **where, "name": item["name"], "arguments": arguments}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}
