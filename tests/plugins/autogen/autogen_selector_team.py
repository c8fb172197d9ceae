"""A ``SelectorGroupChat`` written the way AutoGen's "Selector Group Chat" guide writes one (no tether
import): a planning agent that splits the task, a web-search agent and a data-analyst agent with one tool
each, a custom selector prompt, and text-mention plus max-message termination. Tools answer from fixed data."""

from __future__ import annotations

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import SelectorGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient


def search_web_tool(query: str) -> str:
    """Search the web for sports statistics."""
    if "2006-2007" in query:
        return "Dwyane Wade scored 1397 points in the 2006-2007 season, with 214 total rebounds."
    if "2007-2008" in query:
        return "Dwyane Wade had 398 total rebounds in the 2007-2008 season."
    return "No data found."


def percentage_change_tool(start: float, end: float) -> float:
    """The percentage change from start to end."""
    return round((end - start) / start * 100, 2)


model_client = OpenAIChatCompletionClient(
    model="stats-model",
    base_url="http://127.0.0.1:9/v1",
    api_key="x",
    model_info={
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "structured_output": False,
        "family": "unknown",
    },
)

planning_agent = AssistantAgent(
    "PlanningAgent",
    description="An agent for planning tasks; it should be the first to engage when given a new task.",
    model_client=model_client,
    system_message="You are a planning agent. Break complex tasks into subtasks for your team members: "
    "WebSearchAgent searches for information, DataAnalystAgent performs calculations. Assign tasks as "
    "'1. <agent> : <task>'. When all tasks are complete, summarize the findings and end with TERMINATE.",
)
web_search_agent = AssistantAgent(
    "WebSearchAgent",
    description="An agent for searching information on the web.",
    tools=[search_web_tool],
    model_client=model_client,
    system_message="You are a web search agent. Your only tool is search_web_tool. Make one search call "
    "at a time and never do calculations.",
)
data_analyst_agent = AssistantAgent(
    "DataAnalystAgent",
    description="An agent for performing calculations.",
    model_client=model_client,
    tools=[percentage_change_tool],
    system_message="You are a data analyst. Given the tasks you were assigned, compute the result with your "
    "tools.",
)

selector_prompt = """Choose the agent that performs the next task.

{roles}

Conversation so far:
{history}

Read the conversation, then pick one agent from {participants} for the next task.
The planner assigns tasks before the other agents start working. Pick exactly one agent.
"""

team = SelectorGroupChat(
    [planning_agent, web_search_agent, data_analyst_agent],
    model_client=model_client,
    termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(max_messages=25),
    selector_prompt=selector_prompt,
    allow_repeated_speaker=True,
)
