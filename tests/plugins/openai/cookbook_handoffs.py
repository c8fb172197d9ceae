"""A routines-and-handoffs loop in the style of the OpenAI cookbook's "Orchestrating agents" notebook, written
with no knowledge of tether: a raw ``openai`` client built at import, agents as pydantic models with plain
Python functions as tools, handoffs as tools that return the next agent, and an escalation tool that ends the
program with ``exit()`` (as the cookbook's does). Adapted for the tests: no ``input()``, one user turn."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from openai import OpenAI
from pydantic import BaseModel

client = OpenAI(base_url="https://api.openai.com/v1", api_key="sk-never-used", max_retries=0)


class Agent(BaseModel):
    name: str = "Agent"
    model: str = "gpt-4o-mini"
    instructions: str = "You are a helpful Agent"
    tools: list[Callable[..., Any]] = []


class Response(BaseModel):
    agent: Agent | None
    messages: list[dict[str, Any]]


_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def function_to_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """A tool schema from a function's signature and docstring."""
    params = inspect.signature(func).parameters
    properties = {name: {"type": _TYPES.get(p.annotation, "string")} for name, p in params.items()}
    required = [name for name, p in params.items() if p.default is inspect.Parameter.empty]
    return {
        "type": "function",
        "function": {
            "name": func.__name__,
            "description": (func.__doc__ or "").strip(),
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


# -- tools ----------------------------------------------------------------------------------------------


def escalate_to_human(summary: str) -> None:
    """Only call this if explicitly asked to."""
    print("Escalating to human agent...")
    print(f"Summary: {summary}")
    exit()


def look_up_item(search_query: str) -> str:
    """Use to find item ID. Search query can be a description or keywords."""
    return "item_132612938"


def execute_refund(item_id: str, reason: str = "not provided") -> str:
    """Refund an item by its id, with the customer's reason."""
    return "success"


def place_order(product: str, price: int) -> str:
    """Place an order for a product at a price (in dollars)."""
    return "Success"


def transfer_to_sales_agent() -> Agent:
    """User for anything sales or buying related."""
    return sales_agent


def transfer_to_issues_and_repairs() -> Agent:
    """User for issues, repairs, or refunds."""
    return issues_and_repairs_agent


def transfer_back_to_triage() -> Agent:
    """Call this if the user brings up a topic outside of your purview."""
    return triage_agent


triage_agent = Agent(
    name="Triage Agent",
    instructions="You are a customer service bot for ACME Inc. Introduce yourself. Always be very brief. "
    "Gather information to direct the customer to the right department.",
    tools=[transfer_to_sales_agent, transfer_to_issues_and_repairs, escalate_to_human],
)
sales_agent = Agent(
    name="Sales Agent",
    instructions="You are a sales agent for ACME Inc. Always answer in a sentence or less.",
    tools=[place_order, transfer_back_to_triage],
)
issues_and_repairs_agent = Agent(
    name="Issues and Repairs Agent",
    instructions="You are a customer support agent for ACME Inc. Always answer in a sentence or less. "
    "Look up the item, then refund it.",
    tools=[look_up_item, execute_refund, transfer_back_to_triage],
)


def execute_tool_call(tool_call: Any, tools: dict[str, Callable[..., Any]], agent_name: str) -> Any:
    name = tool_call.function.name
    args = json.loads(tool_call.function.arguments)
    print(f"{agent_name}: {name}({args})")
    return tools[name](**args)


def run_full_turn(agent: Agent, messages: list[dict[str, Any]]) -> Response:
    current_agent = agent
    num_init_messages = len(messages)
    messages = messages.copy()
    while True:
        tool_schemas = [function_to_schema(tool) for tool in current_agent.tools]
        tools = {tool.__name__: tool for tool in current_agent.tools}
        response = client.chat.completions.create(
            model=current_agent.model,
            messages=[{"role": "system", "content": current_agent.instructions}, *messages],
            tools=tool_schemas or None,  # type: ignore[arg-type]
        )
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.content:
            print(f"{current_agent.name}:", message.content)
        if not message.tool_calls:
            break
        for tool_call in message.tool_calls:
            result = execute_tool_call(tool_call, tools, current_agent.name)
            if type(result) is Agent:
                current_agent = result
                result = f"Transferred to {current_agent.name}. Adopt persona immediately."
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": result})
    return Response(agent=current_agent, messages=messages[num_init_messages:])


def serve_customer(message: str) -> str:
    """One customer message through the agents, starting at triage: the last thing the agents said."""
    response = run_full_turn(triage_agent, [{"role": "user", "content": message}])
    return str(response.messages[-1].get("content") or "")
