"""A triage agent that hands off to two specialists, written as an OpenAI Agents SDK user would write it.
It knows nothing of tether.

``triage_agent`` reads the question and hands off to ``math_agent`` (arithmetic, with ``add`` and ``divide``
tools) or to ``words_agent`` (questions about words, with ``count_letters``). Run it on its own with
``OPENAI_API_KEY`` set: ``python examples/triage_openai_agents/agent.py "What is 12 + 30?"``.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner, function_tool

MODEL = "gpt-4o-mini"

TRIAGE_PROMPT = "You route questions: arithmetic goes to the math agent, questions about words to the words agent."
MATH_PROMPT = "You solve arithmetic with the add and divide tools, then state the result as a number."
WORDS_PROMPT = "You answer questions about words; use count_letters to count letters, then state the count."


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool
def divide(a: int, b: int) -> float:
    """Divide a by b."""
    return a / b  # raises ZeroDivisionError for b == 0, as plain Python does


@function_tool
def count_letters(word: str) -> int:
    """Count the letters of a word."""
    return sum(ch.isalpha() for ch in word)


math_agent = Agent(
    name="math_agent",
    handoff_description="Arithmetic: sums and quotients.",
    instructions=MATH_PROMPT,
    tools=[add, divide],
    model=MODEL,
)

words_agent = Agent(
    name="words_agent",
    handoff_description="Questions about words and letters.",
    instructions=WORDS_PROMPT,
    tools=[count_letters],
    model=MODEL,
)

triage_agent = Agent(
    name="triage_agent",
    instructions=TRIAGE_PROMPT,
    handoffs=[math_agent, words_agent],
    model=MODEL,
)


async def main(question: str) -> None:
    result = await Runner.run(triage_agent, input=question)
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What is 12 + 30?"))
