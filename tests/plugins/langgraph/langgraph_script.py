"""How the fake LLM answers the calculator graph, from the request alone (so concurrent rollouts each get a
consistent script): the planner names a tool, the solver calls it and then reads its result, the finisher
repeats the solver's last words."""

from __future__ import annotations

import re
from typing import Any

from langgraph_calc_graph import FINISH_PROMPT, PLANNER_PROMPT, SOLVER_PROMPT

from tether.testing.fake_llm import Reply, text, tool_call

_QUESTION = re.compile(r"(-?\d+)\s*([+/])\s*(-?\d+)")


def task(i: int) -> dict[str, Any]:
    """The i-th task: the graph's input state."""
    return {"question": f"What is {i} + 7?"}


def reply(request: dict[str, Any], *, delay_s: float = 0.0) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content") or "") if messages else ""
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    if system.startswith(PLANNER_PROMPT):
        return text("Use the calculator.", delay_s=delay_s)
    if system.startswith(SOLVER_PROMPT):
        results = [m for m in messages if m.get("role") == "tool"]
        if results:
            return text(f"The result is {results[-1]['content']}.", delay_s=delay_s)
        match = _QUESTION.search(users[-1] if users else "")
        if match is None:
            return text("I cannot tell.", delay_s=delay_s)
        a, op, b = match.groups()
        call = tool_call("add" if op == "+" else "divide", {"a": int(a), "b": int(b)})
        call.delay_s = delay_s
        return call
    if system.startswith(FINISH_PROMPT):
        last = str(messages[-1].get("content") or "")
        return text(f"Final answer: {last}", delay_s=delay_s)
    return text(f"Echo: {users[-1] if users else ''}", delay_s=delay_s)
