"""The example triage agent, loaded for the tests, and how the fake LLM answers it from the request alone (so
concurrent rollouts each get a consistent script): the triage agent hands arithmetic to ``math_agent`` and
anything else to ``words_agent``; each specialist calls its tool once and then states the tool's result."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tether.testing.fake_llm import Reply, text, tool_call

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "triage_openai_agents"


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


example = _load("triage_openai_agents_example", EXAMPLE_DIR / "agent.py")

_ARITHMETIC = re.compile(r"(-?\d+)\s*([+/])\s*(-?\d+)")
_WORD = re.compile(r"'(\w+)'")


def math_task(i: int) -> dict[str, Any]:
    return {"question": f"What is {i} + 7?", "answer": i + 7}


def words_task(word: str) -> dict[str, Any]:
    return {"question": f"How many letters are in '{word}'?", "answer": len(word)}


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = str(messages[0].get("content") or "") if messages else ""
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    question = users[-1] if users else ""
    results = [m for m in messages if m.get("role") == "tool"]
    if system.startswith(example.TRIAGE_PROMPT):
        target = "math_agent" if _ARITHMETIC.search(question) else "words_agent"
        return tool_call(f"transfer_to_{target}", {})
    if len(results) >= 2:  # the handoff's result, then the specialist's own tool result
        return text(f"The answer is {results[-1]['content']}")
    if system.startswith(example.MATH_PROMPT):
        match = _ARITHMETIC.search(question)
        if match is None:
            return text("I cannot tell.")
        a, op, b = match.groups()
        return tool_call("add" if op == "+" else "divide", {"a": int(a), "b": int(b)})
    if system.startswith(example.WORDS_PROMPT):
        word = _WORD.search(question)
        return tool_call("count_letters", {"word": word.group(1) if word else question})
    return text(f"Echo: {question}")


def reward(task: dict[str, Any], output: Any) -> float:
    return float(str(task["answer"]) in str(output))
