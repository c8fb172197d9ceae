"""A user's calculator agent written against the plain openai client, with no knowledge of tether or OpenTelemetry:
the client is built at import time with a hard-coded base URL, and the function runs the tool loop itself."""

from __future__ import annotations

import json
from typing import Any

import openai

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression such as '2 + 3'.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def calculator(expression: str) -> str:
    left, op, right = expression.split()
    if op != "+":
        raise ValueError(f"unsupported operator {op!r}")
    return str(int(left) + int(right))


SYSTEM = "You are a calculator agent. Use the calculator tool."


def solve(question: str) -> str:
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    for _ in range(4):
        reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        calls: list[Any] = list(message.tool_calls)
        for call in calls:
            try:
                result = calculator(**json.loads(call.function.arguments))
            except Exception as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "gave up"
