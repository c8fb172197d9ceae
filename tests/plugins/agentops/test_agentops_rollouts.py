"""A plain-openai function agent instrumented with AgentOps, run through ``Trainer.dev`` against the fake LLM:
its AgentOps spans land in the rollout's spans with tether kinds and AgentOps' agent name, per rollout under
concurrency; the AgentOps agent name reaches the proxy (so ``optimize=`` selects it); the runner leaves the
global OpenTelemetry state as it found it."""

from __future__ import annotations

from typing import Any

import agentops_calc_agent
from calc_script import reply, task
from opentelemetry import trace

import tether
from tether import spans as schema
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.training.run.dev_report import DevReport
from tether.types import RolloutStatus, Span, SpanKind
from tether_agentops import agentops_provider
from tether_agentops import tracer as plugin_tracer
from tether_agentops.processor import processors_of

SYSTEM = {"role": "system", "content": "You are a calculator agent. Use the calculator tool."}


async def _dev(agent: Any, tasks: list[Any], **trainer: Any) -> DevReport:
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await Trainer(model=backend, **trainer).adev(agent, tasks)
        finally:
            await backend.close()


def _agentops_spans(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.attributes.get("source") == "agentops"]


def _wrap(**kwargs: Any) -> Any:
    return tether.wrap(agentops_calc_agent.solve, adapter="openai", reward=lambda t, o: 1.0, **kwargs)


async def test_agentops_spans_land_in_the_rollout_with_tether_kinds() -> None:
    report = await _dev(_wrap(), ["What is 1 + 4?"])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    ours = _agentops_spans(rollout.spans)
    assert [(s.kind, s.name) for s in ours] == [
        (SpanKind.LLM, "openai.chat.completion"),
        (SpanKind.TOOL, "calculator"),
        (SpanKind.LLM, "openai.chat.completion"),
        (SpanKind.OTHER, "calc_agent.agent"),
    ], str(rollout)
    assert {s.agent_name for s in ours} == {"calc_agent"}
    first, tool, second, agent_span = ours
    assert first.attributes[schema.REQUEST_MESSAGES] == [SYSTEM, {"role": "user", "content": "What is 1 + 4?"}]
    (call,) = first.attributes[schema.RESPONSE]["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression":"1 + 4"}'}
    assert first.attributes["usage"]["completion_tokens"] > 0
    assert tool.attributes[schema.TOOL_NAME] == "calculator"
    assert tool.attributes[schema.TOOL_ARGUMENTS] == {"expression": "1 + 4"}
    assert tool.attributes[schema.TOOL_RESULT] == "5"
    # the second call's request carries the tool call and its result, rebuilt from AgentOps' flat attributes
    assert second.attributes[schema.REQUEST_MESSAGES][2]["tool_calls"][0]["id"] == call["id"]
    assert second.attributes[schema.REQUEST_MESSAGES][3] == {
        "role": "tool",
        "content": "5",
        "tool_call_id": call["id"],
    }
    assert second.attributes[schema.RESPONSE]["content"] == "The answer is 5"
    assert agent_span.attributes["agentops.span.kind"] == "agent"
    # AgentOps' spans nest as they did in OpenTelemetry, and sit in time inside the agent span
    assert first.attributes["otel.parent_id"] == agent_span.attributes["otel.span_id"]
    assert agent_span.start_time <= first.start_time <= first.end_time <= tool.start_time <= agent_span.end_time


async def test_the_agentops_agent_name_reaches_the_proxy_and_optimize_selects_it() -> None:
    report = await _dev(_wrap(optimize=["calc_agent"]), ["What is 2 + 5?"])
    (rollout,) = report.rollouts
    assert [(t.agent_name, t.trainable) for t in rollout.transitions] == [("calc_agent", True)] * 2
    proxy = [s for s in rollout.spans if s.kind == SpanKind.LLM and s.name == schema.LLM_CALL]
    assert [s.agent_name for s in proxy] == ["calc_agent", "calc_agent"]
    assert report.agent_names == {"calc_agent"}


async def test_a_failing_tool_yields_a_tool_span_with_the_error() -> None:
    report = await _dev(_wrap(), ["What is 2 * 3?"])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
    (tool,) = [s for s in _agentops_spans(rollout.spans) if s.kind == SpanKind.TOOL]
    assert tool.attributes[schema.TOOL_ARGUMENTS] == {"expression": "2 * 3"}
    assert tool.attributes[schema.TOOL_ERROR] == "ValueError: unsupported operator '*'"
    assert schema.TOOL_RESULT not in tool.attributes


async def test_concurrent_rollouts_each_get_their_own_agentops_spans() -> None:
    tasks = [task(i) for i in range(4)]
    report = await _dev(_wrap(), tasks, n_runners=4)
    assert [r.status for r in report] == [RolloutStatus.SUCCEEDED] * 4
    for rollout in report:
        ours = _agentops_spans(rollout.spans)
        assert len(ours) == 4, str(rollout)
        asked = {s.attributes[schema.REQUEST_MESSAGES][1]["content"] for s in ours if s.kind == SpanKind.LLM}
        assert asked == {rollout.rollout.input}
        (tool,) = [s for s in ours if s.kind == SpanKind.TOOL]
        assert tool.attributes[schema.TOOL_ARGUMENTS]["expression"] in rollout.rollout.input
    otel_traces = {s.attributes["otel.trace_id"] for r in report for s in _agentops_spans(r.spans)}
    assert len(otel_traces) == 4


async def test_the_runner_leaves_the_global_otel_state_as_it_found_it() -> None:
    provider = trace.get_tracer_provider()
    assert provider is agentops_provider()  # the user's agentops.init installed it, not tether
    before = processors_of(provider)
    report = await _dev(_wrap(), ["What is 1 + 1?"])
    assert _agentops_spans(report.rollouts[0].spans)
    assert trace.get_tracer_provider() is provider
    assert processors_of(provider) == before
    assert not plugin_tracer.attached
    # after the run, AgentOps spans go nowhere in tether (outside any rollout they never did)
    agentops_calc_agent.calculator(expression="1 + 1")
    assert plugin_tracer.processor is not None and plugin_tracer.processor.open_spans == 0
