"""A calculator graph written as a LangGraph user writes one — nothing here knows about tether.

The model client is built at import time with a hard-coded ``base_url`` (nothing listens there: tether must
redirect it). A planner node writes a plan, an agent node solves the question with calculator tools, the
``tools`` node runs them, and a finishing node states the answer. Planner and finisher are sync functions
(LangGraph runs them in worker threads), the agent node is async.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

# use_responses_api=False keeps ChatOpenAI on chat completions whatever the model name
llm = ChatOpenAI(
    model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="x", use_responses_api=False, max_retries=0
)

PLANNER_PROMPT = "You are the planner. Say which calculator tool answers the question."
SOLVER_PROMPT = "You are the solver. Use the calculator tools, then say the result."
FINISH_PROMPT = "You are the finisher. State the final answer as a number."


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return operator.truediv(a, b)


TOOLS = [add, divide]
solver_llm = llm.bind_tools(TOOLS)


class State(TypedDict, total=False):
    question: str
    plan: str
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str


def planner(state: State) -> dict[str, Any]:
    plan = llm.invoke([SystemMessage(PLANNER_PROMPT), HumanMessage(state["question"])])
    return {"plan": plan.content, "messages": [HumanMessage(state["question"])]}


async def agent(state: State) -> dict[str, Any]:
    prompt = SystemMessage(f"{SOLVER_PROMPT}\nPlan: {state.get('plan', '')}")
    reply = await solver_llm.ainvoke([prompt, *state["messages"]])
    return {"messages": [reply]}


def finish(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    final = llm.invoke(
        [SystemMessage(FINISH_PROMPT), HumanMessage(state["question"]), AIMessage(str(last.content))]
    )
    return {"answer": final.content}


def build_graph(*, handle_tool_errors: bool = True, name: str = "calculator") -> Any:
    builder = StateGraph(State)
    builder.add_node("planner", planner)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(TOOLS, handle_tool_errors=handle_tool_errors))
    builder.add_node("finish", finish)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "finish"})
    builder.add_edge("tools", "agent")
    builder.add_edge("finish", END)
    return builder.compile(name=name)


graph = build_graph()
# the same graph, but a tool's exception ends the run instead of going back to the model as a ToolMessage
strict_graph = build_graph(handle_tool_errors=False, name="strict_calculator")


def chat(state: MessagesState) -> dict[str, Any]:
    return {"messages": [llm.invoke(state["messages"])]}


# a one-node chatbot over a list of messages
chatbot = StateGraph(MessagesState).add_node("chat", chat).add_edge(START, "chat").compile()
