"""How the fake LLM answers the LlamaIndex notebook's three agents, from the request alone (so concurrent rollouts
each get a consistent script): the ResearchAgent searches, records notes and hands off to the WriteAgent, which
writes the report and hands off to the ReviewAgent, which reviews it and answers."""

from __future__ import annotations

from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call

RESEARCH = "You are the ResearchAgent"
WRITE = "You are the WriteAgent"
REVIEW = "You are the ReviewAgent"
FINAL = "The report has been reviewed and approved."


def _called(messages: list[dict[str, Any]]) -> list[str]:
    """The tools the current agent's model called so far, in order (from the assistant messages)."""
    return [
        call["function"]["name"]
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    ]


def _topic(messages: list[dict[str, Any]]) -> str:
    """The user's message (an ``AgentWorkflow`` with ``initial_state`` puts the state before it)."""
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    return users[0].rpartition("Current message:\n")[2].strip() if users else ""


def report_of(topic: str) -> str:
    return f"# Report\n\n{topic}"


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    called = _called(messages)
    topic = _topic(messages)
    if system.startswith(RESEARCH):
        if "search_web" not in called:
            return tool_call("search_web", {"query": topic})
        if "record_notes" not in called:
            return tool_call("record_notes", {"notes": f"Notes on: {topic}", "notes_title": "History"})
        return tool_call("handoff", {"to_agent": "WriteAgent", "reason": "Notes are recorded."})
    if system.startswith(WRITE):
        if "write_report" not in called:
            return tool_call("write_report", {"report_content": report_of(topic)})
        return tool_call("handoff", {"to_agent": "ReviewAgent", "reason": "The report is written."})
    if system.startswith(REVIEW):
        if "review_report" not in called:
            return tool_call("review_report", {"review": "Approved."})
        return text(FINAL)
    return text(f"unexpected request: {system[:60]!r}")
