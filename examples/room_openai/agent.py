"""A meeting-room booking agent written against the plain ``openai`` client. It knows nothing of tether.

The client is built at import time with a fixed base URL; tether redirects its requests while it trains the
agent. The function runs the tool loop itself: the model calls ``find_rooms`` (floor, seats, equipment) and
then ``book_room``; a confirmed booking ends the conversation. The system prompt is a template formatted with
the office's name; a caller may pass another template (a prompt optimizer does).
"""

from __future__ import annotations

import json
from typing import Any

import offices
import openai

SYSTEM_PROMPT = "You book meeting rooms in the {office} office. Call find_rooms, then book_room."

client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="not-needed", max_retries=0)

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "find_rooms",
            "description": "Free rooms that fit, smallest first",
            "parameters": {
                "type": "object",
                "properties": {
                    "floor": {"type": "integer"},
                    "seats": {"type": "integer"},
                    "equipment": {"type": "string", "enum": offices.EQUIPMENT},
                },
                "required": ["floor", "seats", "equipment"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_room",
            "description": "Book a room",
            "parameters": {
                "type": "object",
                "properties": {"room": {"type": "string"}},
                "required": ["room"],
            },
        },
    },
]


def find_rooms(office: str, floor: int, seats: int, equipment: str) -> str:
    rooms = offices.find_rooms(office, int(floor), int(seats), str(equipment))
    return json.dumps([{"room": r.name, "seats": r.seats} for r in rooms]) if rooms else "no room fits"


def book_room(office: str, room: str) -> str:
    if room not in {r.name for r in offices.ROOMS[office]}:
        raise ValueError(f"there is no room {room!r} in {office}")
    return f"booked {room}"


def messages_for(task: dict[str, Any], template: str = SYSTEM_PROMPT) -> list[dict[str, Any]]:
    """The conversation's first two messages: the system prompt for the office, and the request."""
    return [
        {"role": "system", "content": template.format(office=task["office"])},
        {"role": "user", "content": task["request"]},
    ]


def book_meeting(
    task: dict[str, Any], system_prompt: str | None = None, model: str = "room-model", max_turns: int = 4
) -> dict[str, Any]:
    """Handle one request; returns the booked room (None when nothing was booked) and the last reply."""
    messages = messages_for(task)
    if system_prompt is not None:
        messages[0]["content"] = system_prompt
    office = task["office"]
    reply = ""
    for _ in range(max_turns):
        response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        reply = message.content or ""
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            name = call.function.name
            try:
                arguments = json.loads(call.function.arguments)
                if name == "find_rooms":
                    result = find_rooms(office, **arguments)
                elif name == "book_room":
                    result = book_room(office, **arguments)
                    return {"room": arguments["room"], "reply": result}
                else:
                    result = f"error: unknown tool {name!r}"
            except Exception as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"room": None, "reply": reply}
