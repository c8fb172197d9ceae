"""How the fake LLM answers the example crew: from the request alone, so concurrent rollouts get consistent
scripts. The researcher calls ``lookup`` on the topic named in its task, then reports the tool's answer;
the writer turns the research (in its task's context) into one sentence."""

from __future__ import annotations

import re
from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call


def task(topic: str) -> dict[str, str]:
    return {"topic": topic}


def first_user_text(messages: list[dict[str, Any]]) -> str:
    return next(str(m.get("content")) for m in messages if m.get("role") == "user")


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    user = first_user_text(messages)
    if system.startswith("You are writer"):
        research = user.split("context you're working with:", 1)[-1].split("Provide your", 1)[0].strip()
        return text(f"In short: {research.removeprefix('Research: ')}")
    if messages[-1].get("role") == "tool":
        return text(f"Research: {messages[-1].get('content')}")
    found = re.search(r"Look up (.+?) with the lookup tool", user)
    return tool_call("lookup", {"topic": found.group(1) if found else "?"})
