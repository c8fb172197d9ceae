"""A calculator agent for chained word problems, written against the plain ``openai`` client. It knows
nothing of tether.

The client is built at import time with a fixed base URL; tether redirects its requests while it trains the
agent. The function runs the tool loop itself: the model calls ``calculator`` once per step of the problem,
each time on the result so far, and then answers with the number. A caller may pass ``on_result``: it is
called after each calculator run with the result (None when the expression failed), which is how a caller
checks intermediate steps (the training script turns each into a reward).
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

import openai

SYSTEM_PROMPT = "Solve the problem one step at a time with the calculator, then answer with the number."

client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="not-needed", max_retries=0)

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate one arithmetic expression",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]

_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError("only numbers and + - * / are allowed")


def calculator(expression: str) -> float:
    """The value of an arithmetic expression of numbers and + - * /."""
    return _evaluate(ast.parse(str(expression), mode="eval").body)


def show(value: float) -> str:
    """A result as the model reads it: ``21`` rather than ``21.0``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def messages_for(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation's first two messages: the system prompt and the question."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["question"]}]


def solve(
    task: dict[str, Any],
    on_result: Callable[[float | None], None] | None = None,
    model: str = "chain-model",
    max_turns: int = 5,
) -> dict[str, Any]:
    """Solve one problem; returns the final answer text and the calculator results in order."""
    messages = messages_for(task)
    results: list[float | None] = []
    answer = ""
    for _ in range(max_turns):
        response = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        answer = message.content or ""
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            value: float | None = None
            try:
                if call.function.name != "calculator":
                    raise ValueError(f"unknown tool {call.function.name!r}")
                value = calculator(json.loads(call.function.arguments)["expression"])
                content = show(value)
            except Exception as exc:
                content = f"error: {exc}"
            results.append(value)
            if on_result is not None:
                on_result(value)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return {"answer": answer, "results": results}
