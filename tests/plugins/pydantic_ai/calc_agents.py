"""Two named PydanticAI agents on ``OpenAIChatModel`` (Chat Completions), built at import with a provider whose
base URL nothing serves (tether's redirect sends their requests to the rollout's proxy): ``boss`` delegates
arithmetic to ``calculator`` from a tool, as PydanticAI's docs show agent delegation; ``calculator`` adds with
its ``add`` tool. ``reply`` scripts the fake LLM from the request alone."""

from __future__ import annotations

import re
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tether.testing.fake_llm import Reply, text, tool_call

BOSS_PROMPT = "You answer questions. Ask the calculator for any arithmetic."
CALCULATOR_PROMPT = "You add numbers with the add tool, then state the sum."

model = OpenAIChatModel("tether-test", provider=OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="unused"))
calculator = Agent(model, name="calculator", instructions=CALCULATOR_PROMPT)
boss = Agent(model, name="boss", instructions=BOSS_PROMPT)


@calculator.tool_plain
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@boss.tool
async def ask_calculator(ctx: RunContext[None], question: str) -> str:
    """Ask the calculator agent an arithmetic question."""
    result = await calculator.run(question, usage=ctx.usage)
    return result.output


_SUM = re.compile(r"(-?\d+)\s*\+\s*(-?\d+)")


def question(i: int) -> dict[str, Any]:
    return {"question": f"What is {i} + 7?", "answer": i + 7}


def reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    system = " ".join(str(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    if results:
        return text(f"The answer is {results[-1]}")
    if CALCULATOR_PROMPT in system:
        match = _SUM.search(users[-1] if users else "")
        if match is None:
            return text("I cannot tell.")
        return tool_call("add", {"a": int(match.group(1)), "b": int(match.group(2))})
    return tool_call("ask_calculator", {"question": users[-1] if users else ""})


def reward(task: dict[str, Any], output: Any) -> float:
    return float(str(task["answer"]) in str(output))
