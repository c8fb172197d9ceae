"""How the fake LLM answers the Agent Framework samples, from the request alone (so concurrent rollouts each get a
consistent script): the coordinator delegates the user's request to its ``creative_writer`` tool (the
``WriterAgent``), then passes the tagline on; the writer writes one; in the sequential workflow the writer
writes and the reviewer reviews."""

from __future__ import annotations

from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call

COORDINATOR = "You coordinate with specialized agents."
WRITER = "You are a creative writer."
COPYWRITER = "You are a concise copywriter."
REVIEWER = "You are a thoughtful reviewer."


def _system(messages: list[dict[str, Any]]) -> str:
    return " ".join(str(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))


def _last_user(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return _text(users[-1].get("content")) if users else ""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def tagline(request: str) -> str:
    return f"Fresh beans, fresh start: {request}"


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = _system(messages)
    if system.startswith(COORDINATOR):
        results = [m for m in messages if m.get("role") == "tool"]
        if results:
            return text(f"Here is your tagline: {_text(results[-1]['content'])}")
        return tool_call("creative_writer", {"request": _last_user(messages)})
    if system.startswith(WRITER):
        return text(tagline(_last_user(messages)))
    if system.startswith(COPYWRITER):
        return text(f"Ride more, pay less. ({_last_user(messages)})")
    if system.startswith(REVIEWER):
        return text("Punchy and clear; keep it.")
    return text(f"unexpected request: {system[:60]!r}")
