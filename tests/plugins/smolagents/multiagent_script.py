"""smolagents' multi-agent example (fixtures/inspect_multiagent_run.py) loaded for the tests, and how the fake
LLM answers it from the request alone (so concurrent rollouts each get a consistent script): the manager
(a ``CodeAgent``) writes Python that calls ``search_agent``; the search agent (a ``ToolCallingAgent``) calls
``web_search``, then ``final_answer`` with what it found; the manager then writes ``final_answer(...)``."""

from __future__ import annotations

import json
from typing import Any

import inspect_multiagent_run as example

from tether.testing.fake_llm import Reply, text, tool_call

AGENTS = {"manager_agent", "search_agent"}
ANSWER = "about 25 years"


def question(i: int) -> dict[str, Any]:
    return {"task": f"Case {i}: if the US keeps its 2024 growth rate, how many years until its GDP doubles?"}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    everything = "\n".join(_text(m.get("content")) for m in messages)
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    observations = [m for m in messages[1:] if "Observation:" in _text(m.get("content"))]
    if "You're a helpful agent named 'search_agent'" in everything:  # the managed agent's task
        if not observations:
            return tool_call("web_search", {"query": "US GDP growth 2024"})
        return tool_call("final_answer", {"answer": f"2.8% growth in 2024, so {ANSWER}"})
    if not observations:
        line = next((ln for u in users for ln in u.splitlines() if ln.startswith("Case ")), "")
        code = f"found = search_agent(task={json.dumps(line)})\nprint(found)"
        return text(f"Thought: I ask the search agent.\n<code>\n{code}\n</code>")
    return text(f"Thought: 70 / 2.8 is 25.\n<code>\nfinal_answer({json.dumps(ANSWER)})\n</code>")


def reward(task: dict[str, Any], output: Any) -> float:
    return float(ANSWER in str(output))


__all__ = ["AGENTS", "example", "question", "reply", "reward"]
