"""Tool calls that do not pass through ``BaseTool.run_json``: an AutoGen agent whose tools live in a workbench
that answers ``ToolResult`` directly, as autogen-ext's ``McpWorkbench`` does for an MCP server (Agent
Lightning's calc_x example). AutoGen logs no ``ToolCallEvent`` for them, so their spans come from the turn's
own tool-call events: every result, success or error, with its arguments, call id and agent name. The last
test runs a real MCP stdio server through ``McpWorkbench`` when the ``mcp`` package is installed."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_calc_agent import calculator, model_client
from autogen_core import CancellationToken
from autogen_core.tools import TextResultContent, ToolResult, ToolSchema, Workbench
from autogen_script import reply, task

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.types import RolloutStatus, SpanKind

pytestmark = pytest.mark.filterwarnings("ignore:Resolved model mismatch:UserWarning")


class CalculatorWorkbench(Workbench):
    """A workbench with one ``calculator`` tool that answers ``ToolResult`` itself, like ``McpWorkbench``."""

    def __init__(self) -> None:
        self.calls: list[str | None] = []

    async def list_tools(self) -> list[ToolSchema]:
        return [
            ToolSchema(
                name="calculator",
                description="Evaluate an arithmetic expression such as '12 * (3 + 4)'.",
                parameters={
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                    "required": ["expression"],
                },
            )
        ]

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        self.calls.append(call_id)
        try:
            text, is_error = calculator(str((arguments or {})["expression"])), False
        except Exception as exc:  # an MCP server answers an error result rather than raising
            text, is_error = f"{type(exc).__name__}: {exc}", True
        return ToolResult(name=name, result=[TextResultContent(content=text)], is_error=is_error)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def reset(self) -> None:
        pass

    async def save_state(self) -> Mapping[str, Any]:
        return {}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        pass


def _agent(workbench: Workbench) -> AssistantAgent:
    return AssistantAgent(
        "mcp_agent",
        model_client=model_client,
        workbench=workbench,
        system_message="You are a calculator agent. Use the calculator tool, then state the answer.",
        reflect_on_tool_use=True,
    )


async def _dev(agent: Any, tasks: list[Any]) -> Any:
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await Trainer(model=backend, n_runners=4).adev(
                tether.wrap(agent, reward=lambda t, o: 1.0), tasks
            )
        finally:
            await backend.close()


async def test_workbench_results_become_tool_spans_with_call_ids() -> None:
    workbench = CalculatorWorkbench()
    report = await _dev(_agent(workbench), [task(1), task(2), "What is 1/0?"])
    by_input = {r.rollout.input: r for r in report.rollouts}
    for question, result in [(task(1), "5"), (task(2), "7")]:
        rollout = by_input[question]
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert tool.agent_name == "mcp_agent"
        asked = rollout.transitions[0].response["tool_calls"][0]["id"]
        assert tool.attributes == {
            spans.TOOL_NAME: "calculator",
            spans.TOOL_ARGUMENTS: {"expression": question.removeprefix("What is ").rstrip("?")},
            spans.TOOL_CALL_ID: asked,
            spans.TOOL_RESULT: result,
        }
        first, second = rollout.transitions
        assert first.step < second.step
    failed = by_input["What is 1/0?"]
    (tool,) = [s for s in failed.spans if s.kind == SpanKind.TOOL]
    assert "ZeroDivisionError" in tool.attributes[spans.TOOL_ERROR]
    assert spans.TOOL_RESULT not in tool.attributes
    assert len(workbench.calls) == 3 and all(workbench.calls), "the workbench ran every call, with its id"


async def test_a_real_mcp_stdio_server_through_mcp_workbench() -> None:
    pytest.importorskip("mcp", reason="the MCP test needs the mcp package (tox's autogen env installs it)")
    from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams

    server = Path(__file__).with_name("mcp_calculator_server.py")
    params = StdioServerParams(
        command=sys.executable, args=[str(server)], env=dict(os.environ), read_timeout_seconds=60
    )
    async with McpWorkbench(server_params=params) as workbench:
        report = await _dev(_agent(workbench), [task(1), "What is 1/0?"])
    ok, failed = report.rollouts
    assert ok.status == RolloutStatus.SUCCEEDED, ok.error
    (tool,) = [s for s in ok.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "mcp_agent"
    assert tool.attributes == {
        spans.TOOL_NAME: "calculator",
        spans.TOOL_ARGUMENTS: {"expression": "1 + 4"},
        spans.TOOL_CALL_ID: ok.transitions[0].response["tool_calls"][0]["id"],
        spans.TOOL_RESULT: "5",
    }
    assert ok.transitions[1].messages[-1]["content"] == "5", "the model got the MCP server's answer"
    (tool,) = [s for s in failed.spans if s.kind == SpanKind.TOOL]
    assert "division by zero" in tool.attributes[spans.TOOL_ERROR]
