"""An AutoGen calculator agent, written as an AutoGen user writes it (no tether import).

The model client is built at import time with a hard-coded ``base_url`` that nothing listens on: inside a
tether rollout the openai plugin redirects its requests to the rollout's proxy.
"""

from __future__ import annotations

import ast
import operator

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

model_client = OpenAIChatCompletionClient(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="x")

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"unsupported expression: {ast.dump(node)}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as '12 * (3 + 4)' and return the result."""
    value = _evaluate(ast.parse(expression, mode="eval").body)
    return str(int(value)) if float(value).is_integer() else str(value)


calculator_agent = AssistantAgent(
    "calculator_agent",
    model_client=model_client,
    tools=[calculator],
    system_message="You are a calculator agent. Use the calculator tool, then state the answer.",
    reflect_on_tool_use=True,
)

# the same agent, streaming its model calls
streaming_agent = AssistantAgent(
    "streaming_agent",
    model_client=model_client,
    tools=[calculator],
    system_message="You are a calculator agent. Use the calculator tool, then state the answer.",
    reflect_on_tool_use=True,
    model_client_stream=True,
)
