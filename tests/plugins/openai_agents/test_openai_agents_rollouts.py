"""Rollouts of the example triage agent: handoffs attributed to the right agents, failing tools, selective
optimization, the SDK's tracing kept at home, and successive event loops."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any, ClassVar

import agents
import pytest
from agents import OpenAIProvider, RunConfig, Runner
from agents.tracing import TracingProcessor, default_exporter, flush_traces, get_trace_provider
from triage_script import example, math_task, reply, reward, words_task

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.spans import is_proxy_llm_span
from tether.testing.fake_llm import FakeLLM
from tether.trainer import Trainer
from tether.types import RolloutStatus, SpanKind
from tether_openai_agents import gate, task_input

AGENTS = {"triage_agent", "math_agent", "words_agent"}


async def _dev(tasks: list[Any], **wrap_kwargs: Any) -> Any:
    async with FakeLLM(handler=reply) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            agent = tether.wrap(example.triage_agent, reward=reward, **wrap_kwargs)
            return await Trainer(model=backend, n_runners=4).adev(agent, tasks)
        finally:
            await backend.close()


async def test_handoffs_are_attributed_to_the_agent_that_made_each_call() -> None:
    report = await _dev([math_task(3), words_task("kitten")])
    math, words = sorted(report.rollouts, key=lambda r: "letters" in r.rollout.input["question"])
    expected = ((math, "math_agent", "add", 10), (words, "words_agent", "count_letters", 6))
    for rollout, specialist, tool, result in expected:
        assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error
        assert rollout.output == f"The answer is {result}" and rollout.reward == 1.0
        assert [t.agent_name for t in rollout.transitions] == ["triage_agent", specialist, specialist]
        # the proxy's own spans (with token ids) are named by the X-Tether-Agent header of each request
        proxy_spans = [s for s in rollout.spans if is_proxy_llm_span(s)]
        assert [s.agent_name for s in proxy_spans] == ["triage_agent", specialist, specialist]
        assert all(t.prompt_token_ids and t.response_token_ids for t in rollout.transitions)
        (handoff,) = [s for s in rollout.spans if s.name == "handoff"]
        assert handoff.attributes == {"handoff.from": "triage_agent", "handoff.to": specialist}
        assert handoff.agent_name == "triage_agent"
        (tool_span,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
        assert tool_span.agent_name == specialist and tool_span.name == tool
        assert tool_span.attributes[spans.TOOL_RESULT] == result
        assert spans.TOOL_ERROR not in tool_span.attributes
        llm_spans = [s for s in rollout.spans if s.name == "openai_agents.generation"]
        assert [s.agent_name for s in llm_spans] == ["triage_agent", specialist, specialist]
        first = llm_spans[0].attributes
        assert first[spans.REQUEST_MESSAGES][0] == {"role": "system", "content": example.TRIAGE_PROMPT}
        assert first[spans.RESPONSE]["tool_calls"][0]["function"]["name"] == f"transfer_to_{specialist}"
        assert first[spans.REQUEST_MODEL] == example.MODEL
    assert not report.all_problems, report.all_problems


def _formatter_sees_tool_exceptions() -> bool:
    """Whether this SDK hands a tool's exception to ``RunConfig.tool_error_formatter`` (0.24 does, 0.20
    does not: there the span keeps the SDK's own description of the failure)."""
    from agents.run_config import ToolErrorFormatterArgs

    return "tool_exception" in str(ToolErrorFormatterArgs.__annotations__["kind"])  # a Literal, or its text


async def test_a_tool_that_raises_yields_a_tool_span_with_the_error() -> None:
    report = await _dev([{"question": "What is 5 / 0?", "answer": "none"}])
    (rollout,) = report.rollouts
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.error  # the SDK tells the model, the run goes on
    (span,) = [s for s in rollout.spans if s.kind == SpanKind.TOOL]
    assert span.name == "divide" and span.agent_name == "math_agent"
    assert span.attributes[spans.TOOL_ARGUMENTS] == {"a": 5, "b": 0}
    if _formatter_sees_tool_exceptions():
        assert span.attributes[spans.TOOL_ERROR] == "ZeroDivisionError: division by zero"
    else:
        assert span.attributes[spans.TOOL_ERROR] == "Error running tool (non-fatal): division by zero"
    assert spans.TOOL_RESULT not in span.attributes
    assert "error occurred" in span.attributes[spans.TOOL_OUTPUT]  # what the model was told
    # the model saw the SDK's default message, not the exception (the agent's behaviour is unchanged)
    last = rollout.transitions[-1].messages[-1]
    assert last["role"] == "tool" and "ZeroDivisionError" not in last["content"]


async def test_optimize_trains_only_the_named_specialists() -> None:
    report = await _dev([math_task(1), words_task("dog")], optimize=["math_agent", "words_agent"])
    seen = set()
    for rollout in report.rollouts:
        assert rollout.transitions
        for t in rollout.transitions:
            seen.add(t.agent_name)
            assert t.trainable == (t.agent_name != "triage_agent"), (t.agent_name, t.trainable)
    assert seen == AGENTS


class _Recorder(TracingProcessor):
    """A processor that keeps what it is given (stands for the user's own tracing)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_trace_start(self, trace: Any) -> None:
        self.events.append(("trace_start", trace))

    def on_trace_end(self, trace: Any) -> None:
        self.events.append(("trace_end", trace))

    def on_span_start(self, span: Any) -> None:
        self.events.append(("span_start", span))

    def on_span_end(self, span: Any) -> None:
        self.events.append(("span_end", span))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def outbound(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Blocks and records every attempt to reach a host other than loopback (name lookups and connects)."""
    attempts: list[Any] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def _local(host: Any) -> bool:
        host = host.decode() if isinstance(host, bytes) else str(host)
        return host in ("localhost", "::1") or host.startswith("127.")

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
            attempts.append(("connect", address))
            raise OSError(f"outbound connection to {address} blocked by the test")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
            attempts.append(("connect_ex", address))
            return 111
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _local(host):
            attempts.append(("getaddrinfo", host))
            raise socket.gaierror(f"name lookup of {host} blocked by the test")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    # the SDK's uploader has a key and gives up at once when blocked
    exporter = default_exporter()
    monkeypatch.setattr(exporter, "_api_key", "sk-test-not-a-key")
    monkeypatch.setattr(exporter, "max_retries", 0)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    yield attempts


async def test_a_run_outside_tether_reaches_the_blocker(outbound: list[Any]) -> None:
    # the check below is meaningful: with the SDK's default processors, a run's traces are uploaded
    provider = get_trace_provider()
    before = gate.processors(provider)
    assert any(type(p).__name__ == "BatchTraceProcessor" for p in before), before
    async with FakeLLM(handler=reply) as llm:
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=llm.base_url, api_key="x")
        config = RunConfig(model_provider=OpenAIProvider(openai_client=client, use_responses=False))
        result = await Runner.run(example.triage_agent, input="What is 2 + 2?", run_config=config)
        await client.close()
    assert result.final_output == "The answer is 4"
    flush_traces()
    assert any("openai.com" in str(a) for a in outbound), outbound


async def test_no_outbound_connection_is_attempted_during_rollouts(
    outbound: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = get_trace_provider()
    before = gate.processors(provider)
    recorder = _Recorder()
    agents.set_trace_processors([*before, recorder])
    try:
        flush_traces()  # whatever earlier tests left in the uploader's queue
        outbound.clear()
        report = await _dev([math_task(2), words_task("owl"), {"question": "What is 1 / 0?", "answer": ""}])
        assert all(r.status == RolloutStatus.SUCCEEDED for r in report.rollouts)
        assert all(r.transitions for r in report.rollouts)
        flush_traces()
        assert outbound == [], f"outbound connections attempted during rollouts: {outbound}"
        assert recorder.events == [], "rollout spans reached the SDK's other trace processors"
        assert gate.processors(provider) == (*before, recorder), "the processors were not restored"
    finally:
        agents.set_trace_processors(list(before))


async def test_runs_outside_rollouts_still_reach_the_users_processors_while_instrumented() -> None:
    provider = get_trace_provider()
    before = gate.processors(provider)
    recorder = _Recorder()
    agents.set_trace_processors([recorder])
    adapter = tether.wrap(example.triage_agent).adapter

    class _Sink:
        spans: ClassVar[list[Any]] = []

        def emit(self, *args: Any, **kwargs: Any) -> None:
            self.spans.append(args)

    adapter.instrument(_Sink())
    try:
        async with FakeLLM(handler=reply) as llm:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=llm.base_url, api_key="x")
            config = RunConfig(model_provider=OpenAIProvider(openai_client=client, use_responses=False))
            await Runner.run(example.math_agent, input="What is 1 + 1?", run_config=config)
            await client.close()
    finally:
        adapter.uninstrument()
        agents.set_trace_processors(list(before))
    kinds = [kind for kind, _ in recorder.events]
    assert kinds[0] == "trace_start" and kinds[-1] == "trace_end" and "span_end" in kinds
    assert _Sink.spans == [], "a run outside any rollout was captured"


async def test_capture_works_when_the_user_disabled_tracing() -> None:
    provider = get_trace_provider()
    agents.set_tracing_disabled(True)
    try:
        assert not gate.tracing_enabled(provider)
        report = await _dev([math_task(4)])
        (rollout,) = report.rollouts
        assert [t.agent_name for t in rollout.transitions] == ["triage_agent", "math_agent", "math_agent"]
        assert [s.name for s in rollout.spans if s.kind == SpanKind.TOOL] == ["add"]
        assert not gate.tracing_enabled(provider), "tracing must be disabled again afterwards"
        assert provider._manual_disabled is True
    finally:
        agents.set_tracing_disabled(False)
    assert gate.tracing_enabled(provider)


def test_successive_sync_dev_calls() -> None:
    # Trainer.dev from sync code, several times: the example's string model names get a client per loop
    agent = tether.wrap(example.triage_agent, reward=reward)
    with FakeLLM(handler=reply) as llm:
        for i in range(2):
            report = Trainer(model=llm.base_url).dev(agent, [math_task(i), words_task("ab" * (i + 1))])
            assert [r.status for r in report.rollouts] == [RolloutStatus.SUCCEEDED] * 2, report.rollouts
            assert sorted(r.reward for r in report.rollouts) == [1.0, 1.0]
    assert gate.hold_count() == 0


def test_task_input() -> None:
    assert task_input("hi") == "hi"
    assert task_input({"answer": 3, "question": "q?"}) == "q?"
    assert task_input({"a": 1}) == '{"a": 1}'
    items = [{"role": "user", "content": "x"}]
    assert task_input(items) is items
