"""How the fake LLM answers the AutoGen test agents: from the request alone, so concurrent rollouts get
consistent scripts. The solver (or the single calculator agent) calls the calculator on the task's
expression, then states the tool's result; the checker approves."""

from __future__ import annotations

from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call


def task(i: int) -> str:
    return f"What is {i} + {i + 3}?"


def expression_of(question: str) -> str:
    return question.removeprefix("What is ").rstrip("?").strip()


def first_user_text(messages: list[dict[str, Any]]) -> str:
    return next(str(m.get("content")) for m in messages if m.get("role") == "user")


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    if "checker" in system:
        return text("Checked. APPROVED")
    if messages[-1].get("role") == "tool":
        return text(f"The answer is {messages[-1].get('content')}")
    question = first_user_text(messages)
    if question.startswith("raw:"):  # the model sends arguments that are not JSON
        return tool_call("calculator", question.removeprefix("raw:"))
    return tool_call("calculator", {"expression": expression_of(question)})
