"""docs/langchain.md's blocks run here (tox env ``langchain``), in one namespace as a reader runs them: an
``AgentExecutor`` wrapped and run by ``Trainer.dev`` against the fake LLM (its URL for the page's
``localhost:8000``), then the planner/solver pipeline, whose calls carry the names the page says. The model,
tools and prompts are what the page leaves to the reader, built as LangChain's documentation builds them.
``tests/core/top/test_docs_blocks.py`` checks every docs block is run somewhere or marked not run."""

from __future__ import annotations

import sys
from operator import itemgetter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_classic")

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "top"))

from docblocks import run_block

import tether
from tether.testing.fake_llm import FakeLLM, text, tool_call


@tool
def multiply(first_int: int, second_int: int) -> int:
    """Multiply two integers together."""
    return first_int * second_int


def _reader() -> dict[str, Any]:
    """What the page leaves to the reader: a model whose URL nothing serves, tools, prompts, a reward."""
    model = ChatOpenAI(
        model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="x", use_responses_api=False, max_retries=0
    )
    scratch = ("placeholder", "{agent_scratchpad}")
    return {
        "tether": tether,
        "model": model,
        "tools": [multiply],
        "prompt": ChatPromptTemplate.from_messages([("system", "Use the tools."), ("human", "{input}"), scratch]),
        "score": lambda task, output: float("21" in str(output)),
        "planner_prompt": ChatPromptTemplate.from_messages([("system", "Plan."), ("human", "{input}")]),
        "solver_prompt": ChatPromptTemplate.from_messages(
            [("system", "Solve. Plan: {plan}"), ("human", "{input}"), scratch]
        ),
        "StrOutputParser": StrOutputParser,
        "itemgetter": itemgetter,
    }


def test_the_langchain_page_runs_as_written() -> None:
    answers = [tool_call("multiply", {"first_int": 3, "second_int": 7}), text("21")]
    with FakeLLM([*answers, text("use multiply"), *answers]) as llm:
        ns = run_block("langchain.md:1", _reader(), {'"http://localhost:8000/v1"': repr(llm.base_url)})
        report = ns["report"]
        assert report.metrics()["mean_reward"] == 1.0
        assert "multiply" in str(report) and "AgentExecutor" in str(report)

        ns = run_block("langchain.md:2", ns, {"tether.wrap(pipeline,": "wrapped = tether.wrap(pipeline,"})
        shown = str(tether.Trainer(model=llm.base_url).dev(ns["wrapped"], ["What is 3 times 7?"]))
        assert llm.remaining == 0
    assert "planner" in shown and "solver" in shown, shown
    assert "unknown sub-agent" not in shown
