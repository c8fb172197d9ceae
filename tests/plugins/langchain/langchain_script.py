"""How the fake LLM answers the LangChain agents, from the request alone (so concurrent rollouts each get a
consistent script): an agent calls the tool the question names, then states the tool's result; the planner
names a tool; a request without a system prompt (the LCEL tool chain) calls ``multiply``."""

from __future__ import annotations

import re
from typing import Any

from langchain_agents import AGENT_PROMPT, EXECUTOR_PROMPT, PLANNER_PROMPT, SUPERVISOR_PROMPT

from tether.testing.fake_llm import Reply, text, tool_call

_QUESTION = re.compile(r"(\d+)\s+(times|plus)\s+(\d+)")


def question(i: int, op: str = "times") -> str:
    return f"What is {i} {op} 7?"


def _call(messages: list[dict[str, Any]], delay_s: float) -> Reply:
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    match = _QUESTION.search(users[-1] if users else "")
    if match is None:
        return text("I cannot tell.", delay_s=delay_s)
    a, op, b = match.groups()
    call = tool_call("multiply" if op == "times" else "add", {"first_int": int(a), "second_int": int(b)})
    call.delay_s = delay_s
    return call


def reply(request: dict[str, Any], *, delay_s: float = 0.0) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content") or "") if messages and messages[0].get("role") == "system" else ""
    if system.startswith(PLANNER_PROMPT):
        return text("Use the calculator tools.", delay_s=delay_s)
    if system.startswith(SUPERVISOR_PROMPT):
        results = [m for m in messages if m.get("role") == "tool"]
        if results:
            return text(f"The expert says: {results[-1]['content']}", delay_s=delay_s)
        users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
        return tool_call("math", {"query": users[-1]})
    if system.startswith((EXECUTOR_PROMPT, AGENT_PROMPT, "You solve")):
        results = [m for m in messages if m.get("role") == "tool"]
        if results:
            return text(f"The result is {results[-1]['content']}.", delay_s=delay_s)
        return _call(messages, delay_s)
    return _call(messages, delay_s)  # the LCEL tool chain sends the question alone
