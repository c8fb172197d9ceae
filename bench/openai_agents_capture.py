"""Capture overhead of the openai_agents plugin per LLM call: the example triage agent (3 model calls, one
handoff, one tool call per run) against the fake LLM, run N times plain (``Runner.run`` with the SDK's own
trace processors and a Chat Completions provider pointed at the fake) and N times inside a rollout scope
with the adapter instrumented (tether's trace processor in place of the SDK's, the agent resolver, the
endpoint redirect) and a sink that keeps the spans. Prints wall time per run, the difference per LLM call,
and the processor's own cost for one generation span. Needs the openai-agents extra:
``python bench/openai_agents_capture.py [--n 40]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "plugins" / "openai_agents")]

CALLS_PER_RUN = 3


class _Sink:
    def __init__(self) -> None:
        self.spans: list[tuple[Any, ...]] = []

    def emit(self, kind: Any, name: str, attributes: dict[str, Any], **kwargs: Any) -> None:
        self.spans.append((kind, name, attributes, kwargs))


async def _runs(n: int) -> tuple[list[float], list[float]]:
    """Wall times of plain and captured runs, alternating (the machine's load drifts between them alike)."""
    from agents import OpenAIProvider, RunConfig, Runner
    from openai import AsyncOpenAI
    from triage_script import example, reply

    from tether.capture import redirect
    from tether.capture.context import RolloutScope, rollout_scope
    from tether.testing.fake_llm import FakeLLM
    from tether_openai_agents import OpenAIAgentsAdapter, rollout_run_config

    plain_times: list[float] = []
    captured_times: list[float] = []
    async with FakeLLM(handler=reply) as llm:
        adapter = OpenAIAgentsAdapter()
        sink = _Sink()
        client = AsyncOpenAI(base_url=llm.base_url, api_key="x")
        plain = RunConfig(model_provider=OpenAIProvider(openai_client=client, use_responses=False))
        scope = RolloutScope("ro-bench", "at-bench", llm.base_url)
        adapter.instrument(sink)  # outside a rollout scope the SDK's own processors get the plain runs
        try:
            for i in range(n + 3):
                question = f"What is {i} + 7?"
                start = time.perf_counter()
                await Runner.run(example.triage_agent, input=question, run_config=plain)
                middle = time.perf_counter()
                with rollout_scope(scope), redirect.installed():
                    await Runner.run(example.triage_agent, input=question, run_config=rollout_run_config())
                end = time.perf_counter()
                if i >= 3:  # warm-up
                    plain_times.append(middle - start)
                    captured_times.append(end - middle)
        finally:
            adapter.uninstrument()
            await client.close()
    assert len(sink.spans) >= 5 * (n + 3), len(sink.spans)
    return plain_times, captured_times


def _processor_cost(n: int) -> float:
    """Seconds for on_span_start + on_span_end of one generation span (3 messages) inside a rollout, plus one
    agent-name lookup, with the agent span open."""
    from agents.tracing import AgentSpanData, GenerationSpanData, get_trace_provider, trace

    from tether.capture.context import RolloutScope, rollout_scope
    from tether_openai_agents import gate

    processor = gate.hold()
    processor.sink = _Sink()
    provider = get_trace_provider()
    messages = [
        {"role": "system", "content": "You route questions." * 5},
        {"role": "user", "content": "What is 3 + 4?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
        },
    ]
    try:
        with rollout_scope(RolloutScope("ro-bench", "at-bench", "http://127.0.0.1:1/v1")), trace("bench"):
            agent_span = provider.create_span(AgentSpanData(name="triage_agent"))
            agent_span.start(mark_as_current=True)
            start = time.perf_counter()
            for _ in range(n):
                span = provider.create_span(GenerationSpanData(input=messages, model="m"))
                span.start(mark_as_current=True)
                processor.agent_name()
                span.span_data.output = [{"role": "assistant", "content": "The answer is 7"}]
                span.finish(reset_current=True)
            elapsed = (time.perf_counter() - start) / n
            agent_span.finish(reset_current=True)
    finally:
        gate.release()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    plain, captured = asyncio.run(_runs(args.n))
    p, c = statistics.median(plain), statistics.median(captured)
    print(f"runs: {args.n} x {CALLS_PER_RUN} LLM calls (triage -> handoff -> tool -> answer)")
    print(f"plain    median {p * 1e3:7.2f} ms/run")
    print(f"captured median {c * 1e3:7.2f} ms/run")
    print(f"overhead {(c - p) / CALLS_PER_RUN * 1e3:+7.2f} ms per LLM call (end to end, includes the redirect)")
    cost = _processor_cost(2000)
    print(f"processor: {cost * 1e6:.1f} us per generation span (span start + agent lookup + end + emit)")


if __name__ == "__main__":
    main()
