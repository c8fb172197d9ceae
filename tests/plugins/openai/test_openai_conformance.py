"""The shared adapter conformance suite, run on a plain function that calls the openai client."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from openai._base_client import BaseClient

from tether import spans
from tether.capture import redirect
from tether.testing.adapter_conformance import AdapterConformance
from tether.testing.fake_llm import Reply, text, tool_call


def _load_agent_module() -> Any:
    name = "plain_calc_agent"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("plain_calc_agent.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return text(f"The answer is {messages[-1]['content']}")
    question = next(m["content"] for m in messages if m["role"] == "user")
    return tool_call("calculator", {"expression": question.removeprefix("What is ").rstrip("?")})


class TestPlainOpenAIFunction(AdapterConformance):
    adapter_name = "openai"
    expected_agents: ClassVar[set[str]] = {"solve"}
    tool_name = "calculator"
    framework_module = "openai"

    def make_agent(self) -> Any:
        return _load_agent_module().solve

    def reply(self, request: dict[str, Any]) -> Reply:
        return _reply(request)

    def make_task(self, i: int) -> Any:
        return f"What is {i} + {i + 3}?"

    def custom_run(self) -> Any:
        return lambda solve, task: solve(task)

    def instrumentation_state(self) -> Any:
        return BaseClient.__dict__["_build_request"], redirect.install_count(), tuple(redirect._listeners)


def _feed_sync(agent: Any, task: str) -> Any:
    return agent(task)


async def _feed_async(agent: Any, task: str, resources: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(agent, task)


# a user's own run= must be captured and named as the adapter's own runs are
@pytest.mark.parametrize("run", [None, _feed_sync, _feed_async], ids=["adapter-run", "sync-run=", "async-run="])
async def test_tool_spans_carry_name_arguments_result_and_agent(run: Any) -> None:
    from tether.plugin.wrap import wrap
    from tether.testing.fake_llm import FakeLLM
    from tether.trainer import Trainer
    from tether.types import RolloutStatus, SpanKind

    def script(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        if messages[-1]["role"] == "tool":
            return text(f"The answer is {messages[-1]['content']}")
        return tool_call("calculator", {"expression": "2 * 3"})  # the tool raises on "*"

    agent = wrap(_load_agent_module().solve, reward=lambda task, output: 1.0, run=run)
    async with FakeLLM(handler=script) as llm:
        report = await Trainer(model=llm.base_url, n_runners=1).adev(agent, ["What is 2 * 3?"])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "solve"
    assert tool.attributes[spans.TOOL_NAME] == "calculator"
    assert tool.attributes[spans.TOOL_ARGUMENTS] == {"expression": "2 * 3"}
    assert tool.attributes[spans.TOOL_RESULT] == "error: unsupported operator '*'"
    llm_calls = [s for s in rollout.spans if s.kind == SpanKind.LLM]
    assert len(llm_calls) == 2 and all(s.agent_name == "solve" for s in llm_calls)
    assert tool.attributes[spans.LLM_CALL_ID] == llm_calls[1].attributes[spans.CALL_ID]
