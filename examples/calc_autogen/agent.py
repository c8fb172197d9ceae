"""A calculator agent, written as an AutoGen user would write it. It knows nothing of tether.

The model client is built at import time with a fixed base URL; tether redirects its requests while it
trains the agent, and the agent's code never changes.
"""

from __future__ import annotations

import ast
import operator
import warnings

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient

SYSTEM_MESSAGE = "Solve the problem with the calculator."

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12*7 or (3+4)/2."""

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return evaluate(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        raise ValueError(f"unsupported expression: {expression!r}")

    with warnings.catch_warnings():  # a garbled expression should fail quietly, not warn
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(expression.strip(), mode="eval")
    value = evaluate(tree)
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


model_client = OpenAIChatCompletionClient(
    model="calc-model",
    base_url="http://127.0.0.1:8000/v1",
    api_key="not-needed",
    model_info={
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "structured_output": False,
        "family": "unknown",
    },
)

agent = AssistantAgent(
    name="calculator_agent",
    model_client=model_client,
    tools=[calculator],
    system_message=SYSTEM_MESSAGE,
)
