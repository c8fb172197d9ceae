"""How the fake LLM answers the agents of ADK's hello_world_ma sample, from the request alone (so concurrent
rollouts each get a consistent script): the root_agent transfers to the roll_agent, which rolls the die and, when
the task asks for a prime check, transfers to the prime_agent, which checks the rolled number and answers."""

from __future__ import annotations

import json
import re
from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call

_NAME = re.compile(r'Your internal name is "([^"]+)"')
_SIDES = re.compile(r"(\d+)-sided")


def agent_of(request: dict[str, Any]) -> str:
    """The agent a request is from: ADK writes the name into the system prompt."""
    messages = request["messages"]
    system = str(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    found = _NAME.search(system)
    return found.group(1) if found else ""


def _called(messages: list[dict[str, Any]]) -> list[str]:
    """The tools this agent's model called so far (ADK shows other agents' turns as user messages)."""
    return [
        call["function"]["name"]
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    ]


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def task_of(messages: list[dict[str, Any]]) -> str:
    users = [_content(m) for m in messages if m.get("role") == "user"]
    return users[0] if users else ""


def rolled(messages: list[dict[str, Any]]) -> int | None:
    """The roll_die result: a tool message of the roll_agent's own, or its turn shown to another agent."""
    for m in messages:
        found = re.search(r"roll_die.*?result['\"]?:\s*(\d+)", _content(m), re.S)
        if found:
            return int(found.group(1))
        if m.get("role") == "tool" and _content(m).strip().lstrip("{").startswith('"result"'):
            return int(json.loads(_content(m))["result"])
    return None


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    agent, called, task = agent_of(request), _called(messages), task_of(messages)
    if agent == "root_agent":
        if "transfer_to_agent" not in called:
            target = "roll_agent" if "roll" in task.lower() else "prime_agent"
            return tool_call("transfer_to_agent", {"agent_name": target})
        return text("Done.")
    if agent == "roll_agent":
        if "roll_die" not in called:
            sides = _SIDES.search(task)
            return tool_call("roll_die", {"sides": int(sides.group(1)) if sides else 6})
        if "prime" in task.lower() and "transfer_to_agent" not in called:
            return tool_call("transfer_to_agent", {"agent_name": "prime_agent"})
        return text(f"I rolled a {rolled(messages)} for you.")
    if agent == "prime_agent":
        if "check_prime" not in called:
            number = rolled(messages)
            return tool_call("check_prime", {"nums": [number if number is not None else 7]})
        tool_results = [_content(m) for m in messages if m.get("role") == "tool"]
        return text(f"Checked: {tool_results[-1] if tool_results else ''}")
    return text(f"unexpected request from {agent!r}")
