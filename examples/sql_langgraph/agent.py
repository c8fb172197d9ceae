"""A SQL agent over the shop database, written as a LangGraph user would write it. It knows nothing of tether.

``write_query`` turns the question into SQL, ``execute`` runs it, ``check_query`` reads the query and what
it returned and answers OK or FIX; on FIX, ``rewrite_query`` writes a new query, which is run and checked
again — at most ``MAX_REWRITES`` times. The graph's final state holds the last query and its result, and
``checks``: every query the checker read with its verdict.

The model client is built at import time with a fixed base URL; tether redirects its requests while it
trains the agent, and the agent's code never changes.
"""

from __future__ import annotations

import operator
import re
import sqlite3
from typing import Annotated, Any, TypedDict

import shop
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

MAX_REWRITES = 2

# use_responses_api=False keeps ChatOpenAI on chat completions whatever the model name
llm = ChatOpenAI(
    model="sql-model", base_url="http://127.0.0.1:9/v1", api_key="not-needed", use_responses_api=False
)

WRITE_PROMPT = f"Write one SQLite query for the question. Tables: {shop.TABLES}"
CHECK_PROMPT = "Is the query right? Reply OK or FIX."
REWRITE_PROMPT = f"Fix the SQLite query for the question. Tables: {shop.TABLES}"


class State(TypedDict, total=False):
    question: str
    query: str
    result: str  # what the query returned, as the checker and rewriter see it
    rows: list[Any]
    error: str | None
    verdict: str
    checks: Annotated[list[dict[str, str]], operator.add]  # every check: the query it read and its verdict
    rewrites: int


def _sql(text: Any) -> str:
    """The query in a model reply, without code fences or a trailing semicolon."""
    body = re.sub(r"```(?:sql)?", "", str(text)).strip()
    return body.rstrip(";").strip()


def _review(state: State) -> str:
    return f"{state['question']}\nSQL: {state['query']}\nResult: {state['result']}"


async def write_query(state: State) -> dict[str, Any]:
    reply = await llm.ainvoke([SystemMessage(WRITE_PROMPT), HumanMessage(state["question"])])
    return {"query": _sql(reply.content), "rewrites": 0}


def execute(state: State) -> dict[str, Any]:
    try:
        rows = shop.run(state["query"])
    except (sqlite3.Error, ValueError) as exc:
        return {"rows": [], "error": str(exc), "result": f"error: {exc}"}
    result = f"{len(rows)} rows" if rows else "no rows"
    if len(rows) == 1 and len(rows[0]) == 1:
        result = f"1 row: {rows[0][0]}"
    return {"rows": [list(r) for r in rows], "error": None, "result": result}


async def check_query(state: State) -> dict[str, Any]:
    reply = await llm.ainvoke([SystemMessage(CHECK_PROMPT), HumanMessage(_review(state))])
    verdict = "FIX" if "FIX" in str(reply.content).upper() else "OK"
    return {"verdict": verdict, "checks": [{"query": state["query"], "verdict": verdict}]}


async def rewrite_query(state: State) -> dict[str, Any]:
    reply = await llm.ainvoke([SystemMessage(REWRITE_PROMPT), HumanMessage(_review(state))])
    return {"query": _sql(reply.content), "rewrites": state.get("rewrites", 0) + 1}


def after_check(state: State) -> str:
    if state.get("verdict") == "FIX" and state.get("rewrites", 0) < MAX_REWRITES:
        return "rewrite_query"
    return END


builder = StateGraph(State)
builder.add_node("write_query", write_query)
builder.add_node("execute", execute)
builder.add_node("check_query", check_query)
builder.add_node("rewrite_query", rewrite_query)
builder.add_edge(START, "write_query")
builder.add_edge("write_query", "execute")
builder.add_edge("execute", "check_query")
builder.add_conditional_edges("check_query", after_check, ["rewrite_query", END])
builder.add_edge("rewrite_query", "execute")
graph = builder.compile(name="sql_agent")
