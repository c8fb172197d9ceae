"""A LangGraph node whose name holds a newline and spaces (LangGraph accepts any string): its calls reach the
proxy, are recorded under the name as written, and ``optimize=`` names it without the surrounding whitespace."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import tether
from tether.models.remote import RemoteBackend
from tether.spans import is_proxy_llm_span
from tether.testing.fake_llm import FakeLLM, text
from tether.trainer import Trainer
from tether.types import RolloutStatus

llm = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", use_responses_api=False, max_retries=0)

WRITER = "write query\n"  # as a name read from a config file might arrive
CHECKER = "  check query "


class State(TypedDict, total=False):
    question: str
    query: str
    verdict: str


def write(state: State) -> dict[str, Any]:
    reply = llm.invoke([SystemMessage("Write SQL."), HumanMessage(state["question"])])
    return {"query": str(reply.content)}


def check(state: State) -> dict[str, Any]:
    reply = llm.invoke([SystemMessage("Check the SQL."), HumanMessage(state["query"])])
    return {"verdict": str(reply.content)}


builder = StateGraph(State)
builder.add_node(WRITER, write)
builder.add_node(CHECKER, check)
builder.add_edge(START, WRITER)
builder.add_edge(WRITER, CHECKER)
builder.add_edge(CHECKER, END)
graph = builder.compile()


async def test_a_node_name_with_a_newline_is_captured_as_written_and_optimizable() -> None:
    agent = tether.wrap(graph, reward=lambda task, out: 1.0, optimize=["write query"])
    async with FakeLLM(handler=lambda request: text("SELECT 1")) as llm_server:
        backend = RemoteBackend(llm_server.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(agent, [{"question": "how many?"}])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert [t.agent_name for t in rollout.transitions] == [WRITER, CHECKER]
    assert [s.agent_name for s in rollout.spans if is_proxy_llm_span(s)] == [WRITER, CHECKER]
    assert [t.trainable for t in rollout.transitions] == [True, False]
    assert not report.all_problems, report.all_problems
