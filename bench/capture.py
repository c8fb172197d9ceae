"""Capture overhead per LLM call: what tether's adapter + endpoint redirect add to an agent's model call.

    .venv/bin/python bench/capture.py [--quick] [--calls N] [--plugins openai,langgraph,autogen]
    /work/venvs/langgraph/bin/python bench/capture.py --plugins langgraph

For each installed plugin, one small agent written as its framework's users write it (model client built once
with a hard-coded ``base_url``) makes one model call per run against the fake LLM, which runs in its own
process. Two ways, alternating round by round so machine noise hits both alike:

- **plain**: the user's own call (``agent(task)``, ``graph.ainvoke(state)``, ``agent.run(task=...)``), nothing of
  tether installed;
- **captured**: what a tether runner does per rollout, minus the store round trips: the adapter and tracers
  instrumented with a span sink (spans go through the ``SpanBatcher`` into a memory store), the rollout scope
  set, every plugin's ``rollout_context`` entered, the task run through ``WrappedAgent.run_task`` with the
  requests redirected to the rollout URL (here the same fake LLM, so the model's cost cancels).

The overhead is captured minus plain, at p50 and p99 of one run's latency, and in CPU time of this process
per call (steadier on a shared machine). One model call per run makes the per-rollout work (fresh agent copy,
rollout contexts) count against that call: an upper bound for agents that make several calls per rollout.
Plugins whose framework is not installed are skipped with a note. Target (issue 4): < 0.5 ms per LLM call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

PLUGINS = ("openai", "langgraph", "autogen")
QUESTION = "What is the capital of France? Reply with one word."


def _serve_fake(queue: Any) -> None:
    from tether.testing.fake_llm import FakeLLM, text

    async def main() -> None:
        llm = FakeLLM(handler=lambda request: text("Paris."))
        await llm.start()
        queue.put(llm.base_url)
        await asyncio.Event().wait()

    asyncio.run(main())


@dataclass
class Scenario:
    """One agent: ``plain()`` is the user's own call; ``agent``/``task`` are what ``tether.wrap`` gets."""

    plugin: str
    agent: Any
    task: Any
    plain: Callable[[], Awaitable[Any]]
    what: str


def _openai(url: str) -> Scenario:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0)

    async def ask(question: str) -> str | None:
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}], temperature=0.7
        )
        return reply.choices[0].message.content

    return Scenario("openai", ask, QUESTION, lambda: ask(QUESTION), "async function, openai.AsyncOpenAI")


def _langgraph(url: str) -> Scenario:
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph

    llm = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key="x", use_responses_api=False, max_retries=0)

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    graph = builder.compile()
    task = {"messages": [("user", QUESTION)]}
    return Scenario("langgraph", graph, task, lambda: graph.ainvoke(task), "1-node StateGraph, ChatOpenAI")


def _autogen(url: str) -> Scenario:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import CancellationToken
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(model="gpt-4o-mini", base_url=url, api_key="x", max_retries=0)
    agent = AssistantAgent("assistant", model_client=client, system_message="Answer briefly.")

    async def plain() -> Any:
        result = await agent.run(task=QUESTION)
        await agent.on_reset(CancellationToken())  # a user reusing the agent starts each task afresh
        return result

    return Scenario("autogen", agent, QUESTION, plain, "AssistantAgent, OpenAIChatCompletionClient")


_BUILDERS: dict[str, tuple[Callable[[str], Scenario], str]] = {
    "openai": (_openai, "openai"),
    "langgraph": (_langgraph, "langgraph"),
    "autogen": (_autogen, "autogen_agentchat"),
}


def _missing(plugin: str) -> str | None:
    import importlib.util

    needed = [_BUILDERS[plugin][1], f"tether_{plugin}"]
    if plugin != "openai":
        needed.append("openai")
    gone = [m for m in needed if importlib.util.find_spec(m) is None]
    return ", ".join(gone) if gone else None


class _Captured:
    """A runner's per-rollout path, without the store round trips: see the module docstring."""

    def __init__(self, scenario: Scenario, url: str) -> None:
        import tether

        self.scenario = scenario
        self.url = url
        self.wrapped = tether.wrap(scenario.agent, adapter=scenario.plugin)

    async def __aenter__(self) -> _Captured:
        from tether.capture.sink import RolloutSink
        from tether.capture.span_batcher import SpanBatcher
        from tether.plugin.manager import get_plugins
        from tether.store.memory import MemoryStore
        from tether.types import Resources, RolloutSpec

        self.store = MemoryStore()
        await self.store.enqueue([RolloutSpec(input=0)])
        ((self.rollout, self.attempt),) = await self.store.dequeue("bench")
        self.batcher = SpanBatcher(self.store)
        await self.batcher.start()
        self.sink = RolloutSink(self.batcher, asyncio.get_running_loop())
        self.tracers = [self.wrapped.adapter, *get_plugins().tracers()]
        for tracer in self.tracers:
            tracer.instrument(self.sink)
        self.resources = Resources(version=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for tracer in reversed(self.tracers):
            tracer.uninstrument()
        await self.batcher.close()
        await self.store.close()

    async def call(self) -> Any:
        from tether.capture import redirect
        from tether.capture.context import RolloutScope, current_scope, current_sink
        from tether.plugin.manager import get_plugins

        scope_token = current_scope.set(RolloutScope(self.rollout.rollout_id, self.attempt.attempt_id, self.url))
        sink_token = current_sink.set(self.sink)
        try:
            async with contextlib.AsyncExitStack() as stack:
                stack.enter_context(redirect.held())  # as the runner does
                for manager in get_plugins().rollout_contexts(self.rollout):
                    await stack.enter_async_context(manager)
                return await self.wrapped.run_task(self.scenario.task, self.resources)
        finally:
            current_sink.reset(sink_token)
            current_scope.reset(scope_token)

    @property
    def spans(self) -> int:
        return self.batcher.written + self.batcher.pending


async def _timed(call: Callable[[], Awaitable[Any]], n: int) -> tuple[list[float], float]:
    latencies = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        latencies.append((time.perf_counter() - t0) * 1000.0)
    return latencies, (time.process_time() - cpu0) * 1000.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _bench(plugin: str, url: str, calls: int, rounds: int) -> dict[str, Any]:
    scenario = _BUILDERS[plugin][0](url)
    per_round = max(1, calls // rounds)
    plain: list[float] = []
    captured: list[float] = []
    cpu_plain = cpu_captured = 0.0
    async with _Captured(scenario, url) as cap:
        for _ in range(20):  # warm up both paths (imports, connections, caches)
            await scenario.plain()
            await cap.call()
        for _ in range(rounds):
            lat, cpu = await _timed(scenario.plain, per_round)
            plain += lat
            cpu_plain += cpu
            lat, cpu = await _timed(cap.call, per_round)
            captured += lat
            cpu_captured += cpu
        await cap.batcher.flush()
        spans = cap.spans
    n = per_round * rounds
    if plugin != "openai" and spans < n + 20:  # plain openai calls: the proxy records the llm span
        raise RuntimeError(f"{plugin}: only {spans} spans captured for {n + 20} captured runs: capture is off")
    return {
        "plugin": plugin,
        "what": scenario.what,
        "plain": plain,
        "captured": captured,
        "cpu_plain": cpu_plain / n,
        "cpu_captured": cpu_captured / n,
        "spans_per_call": spans / (n + 20),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    parser.add_argument("--calls", type=int, default=None, help="calls per plugin and way (default 3000)")
    parser.add_argument("--plugins", default=",".join(PLUGINS))
    args = parser.parse_args()
    calls = args.calls or (300 if args.quick else 3000)
    rounds = 5 if args.quick else 15
    wanted = [p.strip() for p in args.plugins.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in _BUILDERS]
    if unknown:
        parser.error(f"unknown plugin(s) {unknown}; choose from {list(PLUGINS)}")

    runnable = []
    for plugin in wanted:
        gone = _missing(plugin)
        if gone:
            print(f'{plugin}: skipped, not installed here: {gone} (pip install "tether[{plugin}]")')
        else:
            runnable.append(plugin)
    if not runnable:
        return

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    fake = ctx.Process(target=_serve_fake, args=(queue,), daemon=True)
    fake.start()
    try:
        url = queue.get(timeout=60)
        rows = [asyncio.run(_bench(plugin, url, calls, rounds)) for plugin in runnable]
    finally:
        fake.terminate()
        fake.join(10)

    print(
        f"\ncapture overhead per LLM call, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.2f}; {calls} calls per way, {rounds} alternating rounds, fake LLM in a process"
    )
    header = (
        f"{'plugin':<10} | {'plain p50':>9} {'p99':>8} | {'captured p50':>12} {'p99':>8} | "
        f"{'added p50':>9} {'p99':>8} {'ratio':>6} | {'added CPU':>9} | spans/call"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        b50, b99 = _pct(row["plain"], 0.5), _pct(row["plain"], 0.99)
        c50, c99 = _pct(row["captured"], 0.5), _pct(row["captured"], 0.99)
        print(
            f"{row['plugin']:<10} | {b50:>7.3f}ms {b99:>6.3f}ms | {c50:>10.3f}ms {c99:>6.3f}ms | "
            f"{c50 - b50:>7.3f}ms {c99 - b99:>6.3f}ms {c50 / b50:>6.2f} | "
            f"{row['cpu_captured'] - row['cpu_plain']:>7.3f}ms | {row['spans_per_call']:.1f}"
        )
    for row in rows:
        print(f"  {row['plugin']}: {row['what']}; mean plain {statistics.fmean(row['plain']):.3f} ms")
    print("ratio: captured p50 / plain p50. Target: added < 0.5 ms per LLM call.")


if __name__ == "__main__":
    main()
