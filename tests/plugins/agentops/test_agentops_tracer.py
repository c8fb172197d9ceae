"""The tracer on its own: idempotent instrument, exact uninstrument (the processor tuple of AgentOps' provider
as before), nothing recorded outside a rollout or after uninstrument, and AgentOps' agent name scoped to its
span."""

from __future__ import annotations

from typing import Any

import agentops_calc_agent
from agentops.sdk.decorators import agent
from opentelemetry import trace

from tether import spans
from tether.capture.context import RolloutScope, agent_scope, current_agent, current_agent_name, rollout_scope
from tether.types import SpanKind
from tether_agentops import AgentOpsTracer, agentops_provider
from tether_agentops.processor import processors_of

SCOPE = RolloutScope(rollout_id="ro-1", attempt_id="at-1", base_url="http://127.0.0.1:9/v1")


class RecordingSink:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def emit(self, kind: SpanKind, name: str, attributes: dict[str, Any], **kwargs: Any) -> None:
        from tether.capture.context import current_scope

        scope = current_scope.get()
        self.spans.append({"kind": kind, "name": name, "attributes": attributes, "scope": scope, **kwargs})


def test_instrument_is_idempotent_and_uninstrument_exact() -> None:
    provider = trace.get_tracer_provider()
    assert provider is agentops_provider()
    before = processors_of(provider)
    tracer, sink = AgentOpsTracer(), RecordingSink()
    tracer.instrument(sink)
    tracer.instrument(sink)
    assert tracer.attached
    assert processors_of(provider) == (*before, tracer.processor)
    with rollout_scope(SCOPE):
        assert agentops_calc_agent.calculator(expression="1 + 2") == "3"
    (span,) = sink.spans
    assert (span["kind"], span["name"], span["scope"]) == (SpanKind.TOOL, "calculator", SCOPE)
    assert span["attributes"][spans.TOOL_RESULT] == "3"
    tracer.uninstrument()
    assert not tracer.attached
    assert trace.get_tracer_provider() is provider
    assert processors_of(provider) == before
    with rollout_scope(SCOPE):
        agentops_calc_agent.calculator(expression="1 + 2")
    assert len(sink.spans) == 1
    tracer.uninstrument()  # a second call is a no-op
    assert processors_of(provider) == before
    tracer.instrument(sink)  # and it attaches again
    assert processors_of(provider) == (*before, tracer.processor)
    tracer.uninstrument()
    assert processors_of(provider) == before


def test_spans_outside_any_rollout_are_not_recorded() -> None:
    tracer, sink = AgentOpsTracer(), RecordingSink()
    tracer.instrument(sink)
    try:
        agentops_calc_agent.calculator(expression="1 + 2")
        assert sink.spans == []
        assert tracer.processor is not None and tracer.processor.open_spans == 0
    finally:
        tracer.uninstrument()


def test_an_agentops_agent_names_the_calls_inside_it_and_only_those() -> None:
    seen: list[str | None] = []

    @agent(name="planner")
    def planner() -> None:
        seen.append(current_agent_name())
        agentops_calc_agent.calculator(expression="2 + 2")

    tracer, sink = AgentOpsTracer(), RecordingSink()
    tracer.instrument(sink)
    try:
        with rollout_scope(SCOPE), agent_scope("outer"):
            planner()
            after = current_agent.get()
    finally:
        tracer.uninstrument()
    assert seen == ["planner"]
    assert after == "outer"
    assert [(s["kind"], s.get("agent_name")) for s in sink.spans] == [
        (SpanKind.TOOL, "planner"),
        (SpanKind.OTHER, "planner"),
    ]


def test_without_a_sink_the_tracer_attaches_to_nothing() -> None:
    provider = trace.get_tracer_provider()
    before = processors_of(provider)
    tracer = AgentOpsTracer()
    assert tracer.attach() is False
    tracer.uninstrument()
    assert processors_of(provider) == before
