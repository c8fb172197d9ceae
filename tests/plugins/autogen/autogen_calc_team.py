"""A two-agent AutoGen team, written as an AutoGen user writes it (no tether import): a solver with a
calculator tool and a checker, taking turns until the checker says APPROVED."""

from __future__ import annotations

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_calc_agent import calculator
from autogen_ext.models.openai import OpenAIChatCompletionClient

# a model name the OpenAI client does not know needs its capabilities spelled out
client = OpenAIChatCompletionClient(
    model="calc-model",
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

solver = AssistantAgent(
    "solver",
    model_client=client,
    tools=[calculator],
    system_message="You are the solver. Use the calculator tool, then state the answer.",
    reflect_on_tool_use=True,
)
checker = AssistantAgent(
    "checker",
    model_client=client,
    system_message="You are the checker. Reply APPROVED if the solver's answer is right.",
)
team = RoundRobinGroupChat(
    [solver, checker],
    termination_condition=TextMentionTermination("APPROVED") | MaxMessageTermination(8),
)
