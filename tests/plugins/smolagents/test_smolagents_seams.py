"""The smolagents plugin's edges: a failing tool's span holds the exception (smolagents turns it into an
observation and the run goes on), and a moved private seam fails instrumentation with ``SeamMissing`` before
anything is installed."""

from __future__ import annotations

from typing import Any

import pytest
from multiagent_script import example
from smolagents import ToolCallingAgent, local_python_executor, tool
from smolagents.tools import Tool

import tether
from tether import spans
from tether.capture.patching import SeamMissing
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, tool_call
from tether.trainer import Trainer
from tether.types import RolloutStatus, SpanKind
from tether_smolagents import SmolagentsAdapter


@tool
def divide(a: int, b: int) -> float:
    """Divide one integer by another.

    Args:
        a: the numerator
        b: the denominator
    """
    return a / b


divider = ToolCallingAgent(tools=[divide], model=example.model, name="divider", max_steps=3, verbosity_level=0)


def _reply(request: dict[str, Any]) -> Reply:
    seen = "\n".join(str(m.get("content")) for m in request["messages"][1:])
    if "division by zero" in seen:
        return tool_call("final_answer", {"answer": "undefined"})
    return tool_call("divide", {"a": 1, "b": 0})


async def test_a_failing_tool_is_captured_with_its_error() -> None:
    agent = tether.wrap(divider, reward=lambda task, out: float(out["text"] == "undefined"))
    async with FakeLLM(handler=_reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            report = await Trainer(model=backend).adev(agent, ["What is 1 / 0?"])
        finally:
            await backend.close()
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert rollout.reward == 1.0 and [t.agent_name for t in rollout.transitions] == ["divider", "divider"]
    failed, final = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert failed.agent_name == "divider" and failed.attributes[spans.TOOL_NAME] == "divide"
    assert failed.attributes[spans.TOOL_ARGUMENTS] == {"a": 1, "b": 0}
    assert failed.attributes[spans.TOOL_ERROR] == "ZeroDivisionError: division by zero"
    assert final.attributes[spans.TOOL_RESULT] == "undefined"


def test_a_moved_seam_fails_before_anything_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    call = Tool.__dict__["__call__"]
    monkeypatch.delattr(local_python_executor, "timeout")

    class _Sink:
        def emit(self, *args: Any, **kwargs: Any) -> None:
            pass

    adapter = SmolagentsAdapter()
    with pytest.raises(SeamMissing, match="smolagents"):
        adapter.instrument(_Sink())
    assert Tool.__dict__["__call__"] is call and not adapter.instrumented
