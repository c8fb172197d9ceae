"""Issue 37 item 7: LangGraph's supervisor tutorial shape — a research agent and a math agent, each a
``create_react_agent`` subgraph (whose own node is ``agent``), added as nodes of a supervisor's graph. Their calls
are named after the outer node (``research_agent``, ``math_agent``), so ``optimize=["math_agent"]`` trains the
math agent's calls; and a rollout whose node raises reports the node's own error, not LangGraph's note
("During task with name ...")."""

from __future__ import annotations

import warnings
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import create_react_agent

import tether
from tether.models.remote import RemoteBackend
from tether.spans import is_proxy_llm_span
from tether.testing.fake_llm import FakeLLM, text
from tether.trainer import Trainer
from tether.types import RolloutStatus

llm = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", use_responses_api=False, max_retries=0)


@tool
def web_search(query: str) -> str:
    """Search the web."""
    return "Paris"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


with warnings.catch_warnings():  # the tutorial's prebuilt agent (LangGraph 1.x points to langchain.agents)
    warnings.simplefilter("ignore", DeprecationWarning)
    research_agent = create_react_agent(llm, tools=[web_search], prompt="You research.", name="research_agent")
    math_agent = create_react_agent(llm, tools=[add], prompt="You do math.", name="math_agent")


def supervisor(state: MessagesState) -> dict[str, Any]:
    reply = llm.invoke([SystemMessage("You manage a research agent and a math agent."), *state["messages"]])
    return {"messages": [reply]}


builder = StateGraph(MessagesState)
builder.add_node("supervisor", supervisor)
builder.add_node("research_agent", research_agent)
builder.add_node("math_agent", math_agent)
builder.add_edge(START, "supervisor")
builder.add_edge("supervisor", "research_agent")
builder.add_edge("research_agent", "math_agent")
builder.add_edge("math_agent", END)
graph = builder.compile()


async def test_subgraph_agents_are_named_after_their_outer_node() -> None:
    agent = tether.wrap(graph, reward=lambda task, out: 1.0, optimize=["math_agent"])
    async with FakeLLM(handler=lambda request: text("done")) as server:
        backend = RemoteBackend(server.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(agent, ["What is the capital of France, plus 2+2?"])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    names = ["supervisor", "research_agent", "math_agent"]
    assert [t.agent_name for t in rollout.transitions] == names
    assert [s.agent_name for s in rollout.spans if is_proxy_llm_span(s)] == names
    assert [t.trainable for t in rollout.transitions] == [False, False, True]
    assert not report.all_problems, report.all_problems  # no "unknown sub-agent 'math_agent'"


def broken(state: MessagesState) -> dict[str, Any]:
    llm.invoke([HumanMessage("hi")])
    raise KeyError("no such column: answer")


failing = StateGraph(MessagesState)
failing.add_node("model", broken)
failing.add_edge(START, "model")
failing.add_edge("model", END)
failing_graph = failing.compile()


async def test_a_failed_rollout_shows_its_own_error() -> None:
    async with FakeLLM(handler=lambda request: text("ok")) as server:
        report = await Trainer(model=server.base_url).adev(tether.wrap(failing_graph), ["q"])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.FAILED
    assert rollout.error is not None
    assert rollout.error.strip().splitlines()[-1] == "KeyError: 'no such column: answer'"
    assert "During task with name 'model'" in rollout.error  # the note is kept, first
    assert "error: KeyError: 'no such column: answer'" in str(rollout)
    assert any("failed: KeyError: 'no such column: answer'" in p for p in report.problems)
