"""LlamaIndex's own multi-agent example (the ``AgentWorkflow`` of docs/examples/agent/agent_workflow_multi.ipynb)
runs unchanged under ``tether.wrap`` + ``Trainer.dev`` against the fake LLM: every call streamed (as
``FunctionAgent`` makes them) and named by the agent whose turn it is across both handoffs, every tool call
(``handoff`` included) captured with its arguments and result, an invalid handoff and a raising tool recorded,
``optimize=`` marking only the named agent, an LLM built at import time working in successive event loops, and
the private seams the adapter relies on failing loudly when a release moves them."""

from __future__ import annotations

import asyncio
from typing import Any

import agent_workflow_multi as example
import pytest
from li_script import FINAL, reply, report_of
from llama_index.core.agent.workflow import AgentWorkflow
from llama_index.llms.openai import OpenAI

import tether
from tether import spans
from tether.capture import redirect
from tether.capture.patching import SeamMissing
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, SpanKind
from tether_llama_index import LlamaIndexAdapter

AGENTS = ["ResearchAgent"] * 3 + ["WriteAgent"] * 2 + ["ReviewAgent"] * 2


def _reward(task: Any, output: Any) -> float:
    return float(output["state"]["report_content"] == report_of(task) and output["state"]["review"] == "Approved.")


async def _dev(
    agent: tether.WrappedAgent, tasks: list[Any], handler: Any = reply, bodies: list[Any] | None = None
) -> DevReport:
    def listen(body: Any, scope: Any, call_id: str) -> None:
        if bodies is not None:
            bodies.append(body)

    redirect.add_listener(listen)
    try:
        async with FakeLLM(handler=handler) as llm:
            backend = RemoteBackend(llm.base_url, return_token_ids=True)
            try:
                return await tether.Trainer(model=backend, n_runners=max(2, len(tasks))).adev(agent, tasks)
            finally:
                await backend.close()
    finally:
        redirect.remove_listener(listen)


async def test_the_example_runs_streamed_with_every_call_named_across_handoffs() -> None:
    bodies: list[Any] = []
    wrapped = tether.wrap(example.agent_workflow, reward=_reward, optimize=["WriteAgent"])
    report = await _dev(wrapped, [example.user_msg, "Write me a report on the history of radio."], bodies=bodies)
    assert len(bodies) == 14 and all(b.get("stream") is True for b in bodies)  # FunctionAgent streams by default
    for rollout in report.rollouts:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.reward == 1.0 and rollout.output["text"] == FINAL
        assert rollout.output["agent"] == "ReviewAgent"
        assert [t.agent_name for t in rollout.transitions] == AGENTS
        assert [t.trainable for t in rollout.transitions] == [name == "WriteAgent" for name in AGENTS]
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        tools = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert [(s.name, s.agent_name) for s in tools] == [
            ("search_web", "ResearchAgent"),
            ("record_notes", "ResearchAgent"),
            ("handoff", "ResearchAgent"),
            ("write_report", "WriteAgent"),
            ("handoff", "WriteAgent"),
            ("review_report", "ReviewAgent"),
        ]
        write = tools[3].attributes
        assert write[spans.TOOL_ARGUMENTS] == {"report_content": report_of(rollout.rollout.input)}
        assert write[spans.TOOL_RESULT] == "Report written."
        assert tools[2].attributes[spans.TOOL_ARGUMENTS]["to_agent"] == "WriteAgent"
    assert not report.all_problems, report.all_problems


async def test_an_invalid_handoff_is_answered_to_the_model_and_recorded() -> None:
    def bad_handoff(request: dict[str, Any]) -> Reply:
        called = [c["function"]["name"] for m in request["messages"] for c in m.get("tool_calls") or []]
        if "handoff" not in called and str(request["messages"][0].get("content")).startswith(
            "You are the Research"
        ):
            return tool_call("handoff", {"to_agent": "NoSuchAgent", "reason": "testing"})
        return reply(request)

    report = await _dev(
        tether.wrap(example.agent_workflow, reward=lambda t, o: 1.0), [example.user_msg], bad_handoff
    )
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    handoff = next(s for s in rollout.spans if s.kind == SpanKind.TOOL and s.name == "handoff")
    # LlamaIndex answers an unknown agent with a message to the model, not an exception
    assert "NoSuchAgent" in str(handoff.attributes.get(spans.TOOL_RESULT))
    assert handoff.agent_name == "ResearchAgent"


async def test_a_raising_tool_is_recorded_with_its_error() -> None:
    async def explode(topic: str) -> str:
        """Useful for nothing."""
        raise ZeroDivisionError("division by zero")

    from llama_index.core.agent.workflow import FunctionAgent

    agent = FunctionAgent(name="Exploder", system_prompt="You explode.", llm=example.llm, tools=[explode])

    def script(request: dict[str, Any]) -> Reply:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return text("It did not explode.")
        return tool_call("explode", {"topic": "x"})

    report = await _dev(tether.wrap(agent, reward=lambda t, o: 1.0), ["Explode."], script)
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    (tool,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert tool.agent_name == "Exploder" and tool.attributes[spans.TOOL_ARGUMENTS] == {"topic": "x"}
    assert "division by zero" in tool.attributes[spans.TOOL_ERROR]
    assert [t.agent_name for t in rollout.transitions] == ["Exploder", "Exploder"]


def test_an_llm_built_at_import_works_in_successive_event_loops() -> None:
    wrapped = tether.wrap(example.agent_workflow, reward=_reward)
    for _ in range(2):  # two event loops, one after the other
        (rollout,) = asyncio.run(_dev(wrapped, [example.user_msg])).rollouts
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    assert example.llm._aclient is None  # the LLM's own client was never made: rollouts used their loop's


def test_a_moved_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Sink:
        def emit(self, *args: Any, **kwargs: Any) -> None:
            pass

    monkeypatch.delattr(AgentWorkflow, "_call_tool")
    with pytest.raises(SeamMissing, match="llama-index-core"):
        LlamaIndexAdapter().instrument(_Sink())
    monkeypatch.undo()
    monkeypatch.delattr(OpenAI, "_get_credential_kwargs")
    adapter = LlamaIndexAdapter()
    with pytest.raises(SeamMissing, match="llama-index-llms-openai"):
        adapter.instrument(_Sink())
    assert not adapter.instrumented
