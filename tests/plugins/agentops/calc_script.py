"""How the fake LLM answers the calculator agent, from the request alone (so concurrent rollouts get
consistent scripts): call the calculator on the question's expression, then state the tool's result."""

from __future__ import annotations

from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call


def task(i: int) -> str:
    return f"What is {i} + {i + 3}?"


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    if messages[-1].get("role") == "tool":
        return text(f"The answer is {messages[-1].get('content')}")
    question = next(str(m.get("content")) for m in messages if m.get("role") == "user")
    return tool_call("calculator", {"expression": question.removeprefix("What is ").rstrip("?").strip()})
