"""LangChain agents written the way LangChain's own documentation writes them — nothing here knows about tether.

- ``agent_executor``: the tool-calling agent of ``langchain_classic`` (``create_tool_calling_agent`` with the
  documented ``chat_history`` / ``input`` / ``agent_scratchpad`` prompt, run by an ``AgentExecutor``).
- ``tool_chain``: the LCEL chain of LangChain's "use tools in a chain" guide: the model with tools bound, a
  step that takes the first tool call's arguments, and the tool (``llm_with_tools | ... | multiply``).
- ``pipeline``: sub-agents as named runnables: an LCEL ``planner`` (``.with_config(run_name=...)``) whose plan
  feeds an ``AgentExecutor`` named ``solver``.
- ``calc_agent``: LangChain 1.x's ``create_agent`` with a ``name=``.
- ``supervisor``: LangChain's "subagents" pattern: a ``create_agent`` supervisor whose tool runs another
  ``create_agent`` agent (``math_expert``).

The model client is built at import time with a hard-coded ``base_url`` where nothing listens: tether must
redirect it.
"""

from __future__ import annotations

from operator import itemgetter

from langchain.agents import create_agent
from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

# use_responses_api=False keeps ChatOpenAI on chat completions whatever the model name
model = ChatOpenAI(
    model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="x", use_responses_api=False, max_retries=0
)

EXECUTOR_PROMPT = "You are a careful calculator assistant. Use the tools for arithmetic."
PLANNER_PROMPT = "You plan calculations. Name the tool that answers the question."
SOLVER_PROMPT = "You solve calculations with the tools. Plan: {plan}"
AGENT_PROMPT = "You are a calculator agent. Use the tools, then state the result."
SUPERVISOR_PROMPT = "You are a supervisor. Ask the math expert for any calculation."


@tool
def multiply(first_int: int, second_int: int) -> int:
    """Multiply two integers together."""
    return first_int * second_int


@tool
def add(first_int: int, second_int: int) -> int:
    """Add two integers."""
    return first_int + second_int


tools = [multiply, add]

# -- the tool-calling agent (langchain_classic) ------------------------------------------------------------

prompt = ChatPromptTemplate.from_messages(
    [
        ("system", EXECUTOR_PROMPT),
        ("placeholder", "{chat_history}"),
        ("human", "{input}"),
        ("placeholder", "{agent_scratchpad}"),
    ]
)
agent = create_tool_calling_agent(model, tools, prompt)
agent_executor = AgentExecutor(agent=agent, tools=tools)

# -- an LCEL chain that calls a tool ----------------------------------------------------------------------

llm_with_tools = model.bind_tools([multiply])
tool_chain = llm_with_tools | (lambda msg: msg.tool_calls[0]["args"]) | multiply

# -- sub-agents by name: an LCEL planner feeding an AgentExecutor --------------------------------------------

planner = (
    ChatPromptTemplate.from_messages([("system", PLANNER_PROMPT), ("human", "{input}")])
    | model
    | StrOutputParser()
).with_config(run_name="planner")
solver_prompt = ChatPromptTemplate.from_messages(
    [("system", SOLVER_PROMPT), ("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
)
solver = AgentExecutor(agent=create_tool_calling_agent(model, tools, solver_prompt), tools=tools, name="solver")
pipeline = {"plan": planner, "input": itemgetter("input")} | solver

# -- LangChain 1.x's agent ----------------------------------------------------------------------------------

calc_agent = create_agent(model, tools=tools, system_prompt=AGENT_PROMPT, name="calculator")

# -- subagents as tools ---------------------------------------------------------------------------------------

math_expert = create_agent(model, tools=tools, system_prompt=AGENT_PROMPT, name="math_expert")


@tool("math", description="Ask the math expert to calculate something")
def call_math_expert(query: str) -> str:
    result = math_expert.invoke({"messages": [{"role": "user", "content": query}]})
    return str(result["messages"][-1].content)


supervisor = create_agent(model, tools=[call_math_expert], system_prompt=SUPERVISOR_PROMPT, name="supervisor")
