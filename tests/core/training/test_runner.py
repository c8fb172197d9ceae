"""The runner and Trainer.dev, end to end over real HTTP: a toy adapter whose agents are plain dicts and
which calls the proxy URL it is given, the proxy, a store, and the scripted fake LLM."""

from __future__ import annotations

import asyncio
import math
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import tether
from tether import spans
from tether._seeds import derive_seed
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.plugin.adapters import Adapter
from tether.plugin.manager import build, reset_plugins
from tether.plugin.wrap import WrappedAgent
from tether.proxy import ProxyServer
from tether.store import Store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SqliteStore
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.training.engine.runner import Runner, RunnerStats
from tether.types import AttemptStatus, LLMEndpoint, Resources, RolloutSpec, RolloutStatus, Span, SpanKind


class _DictAgentAdapter(Adapter):
    """Agents are dicts {"name": ..., "calls": n}: each run makes n chat calls to the rollout's endpoint,
    emits a tool span per tool call, and returns the last answer."""

    name = "dict-agent"

    def accepts(self, agent: Any) -> bool:
        return isinstance(agent, dict) and "calls" in agent

    async def run(self, agent: dict[str, Any], task: Any, resources: Resources) -> Any:
        if agent.get("raise"):
            raise RuntimeError(agent["raise"])
        assert resources.llm is not None
        answer = None
        async with aiohttp.ClientSession() as session:
            for _ in range(agent["calls"]):
                body = {"model": "m", "messages": [{"role": "user", "content": str(task)}]}
                headers = {"X-Tether-Agent": agent["name"]}
                async with session.post(
                    f"{resources.llm.base_url}/chat/completions", json=body, headers=headers
                ) as r:
                    data = await r.json()
                    if r.status != 200 and agent.get("swallow_errors"):  # an agent that carries on regardless
                        return None
                    assert r.status == 200, data
                message = data["choices"][0]["message"]
                for call in message.get("tool_calls") or []:
                    function = call["function"]
                    self.sink.emit(
                        SpanKind.TOOL,
                        function["name"],
                        spans.tool_attributes(function["name"], function["arguments"], call_id=call["id"]),
                        agent_name=agent["name"],
                    )
                answer = message.get("content")
        if agent.get("emit"):
            tether.emit_reward(agent["emit"], agent=agent.get("emit_for"))
        return answer


class _Plugin:
    @tether.hookimpl
    def register_adapters(self, register: Any) -> None:
        register(_DictAgentAdapter())


@pytest.fixture(autouse=True)
def _plugins() -> Any:
    plugins = build(entry_points=False)
    plugins.register(_Plugin(), name="dict-agent")
    reset_plugins(plugins)
    yield
    reset_plugins()


def _echo(request: dict[str, Any]) -> Reply:
    question = request["messages"][-1]["content"]
    if "tool" in question:
        return tool_call("add", {"a": 1, "b": 2})
    return text(f"answer to {question}")


async def _dev(agent: Any, tasks: list[Any], repeats: int = 1, **trainer: Any) -> Any:
    async with FakeLLM(handler=_echo) as llm:
        backend = RemoteBackend(llm.base_url, return_token_ids=True)
        try:
            return await tether.Trainer(model=backend, **trainer).adev(agent, tasks, repeats=repeats)
        finally:
            await backend.close()


async def test_dev_captures_calls_rewards_and_token_ids() -> None:
    agent = tether.wrap({"name": "solver", "calls": 2}, reward=lambda task, out: float(out == f"answer to {task}"))
    report = await _dev(agent, ["q1", "q2 tool"])
    by_input = {r.rollout.input: r for r in report}
    ok, tooly = by_input["q1"], by_input["q2 tool"]
    assert ok.status == RolloutStatus.SUCCEEDED and ok.reward == 1.0 and ok.output == "answer to q1"
    assert [t.agent_name for t in ok.transitions] == ["solver", "solver"]
    assert all(t.response_token_ids and t.prompt_token_ids for t in ok.transitions)
    assert bytes(ok.transitions[0].response_token_ids).decode() == "answer to q1"
    assert tooly.reward == 0.0
    tools = [s for s in tooly.spans if s.kind == SpanKind.TOOL]
    assert [s.attributes[spans.TOOL_NAME] for s in tools] == ["add", "add"]
    assert "solver → LLM: calls add(" in str(tooly) and "tool add(" in str(tooly)
    assert report.metrics()["llm_calls_per_rollout"] == 2.0


async def test_a_failing_rollout_does_not_stop_the_others() -> None:
    good = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    bad = tether.wrap({"name": "a", "calls": 1, "raise": "boom"}, reward=lambda t, o: 1.0)
    report = await _dev(bad, ["x"])
    (failed,) = report.rollouts
    assert failed.status == RolloutStatus.FAILED
    assert "RuntimeError: boom" in (failed.error or "") and "Traceback" in (failed.error or "")
    report = await _dev(good, ["x", "y", "z"])
    assert [r.status for r in report] == [RolloutStatus.SUCCEEDED] * 3


async def test_non_finite_or_non_numeric_reward_is_an_error_not_a_zero() -> None:
    for bad in (float("nan"), "1.0", None.__class__):
        agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o, bad=bad: bad)
        (rollout,) = (await _dev(agent, ["x"])).rollouts
        assert rollout.status == RolloutStatus.FAILED
        assert "reward must be a finite number" in (rollout.error or "")


def _raise(task: Any, output: Any) -> float:
    raise KeyError("answer")


@pytest.mark.parametrize(
    ("reward", "why"),
    [(_raise, "KeyError: 'answer'"), (lambda t, o: float("nan"), "reward must be a finite number, got nan")],
    ids=["raises", "nan"],
)
async def test_dev_report_says_how_many_rollouts_failed_and_why(reward: Any, why: str) -> None:
    report = await _dev(tether.wrap({"name": "a", "calls": 1}, reward=reward), ["x", "y", "z"])
    assert [r.status for r in report] == [RolloutStatus.FAILED] * 3
    assert report.problems[0].startswith("3 of 3 rollouts failed"), report.problems
    assert why in report.problems[0]
    assert all(why in p for r in report for p in r.problems), "each failed rollout says why"
    assert not any("made no LLM call" in p for p in report.all_problems)
    metrics = report.metrics()
    assert metrics["failed"] == 3.0
    assert math.isnan(metrics["mean_reward"]), "no rollout has a reward: the mean is not 0.0"
    assert "3 of 3 rollouts failed" in str(report)


@pytest.mark.parametrize("swallow", [False, True], ids=["agent-raises", "agent-swallows-the-error"])
async def test_dev_report_names_the_backend_error_of_a_dead_model_url(swallow: bool) -> None:
    with socket.socket() as probe:  # a port nothing listens on: the backend's requests are refused
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    agent = tether.wrap({"name": "a", "calls": 1, "swallow_errors": swallow}, reward=lambda t, o: 1.0)
    report = await tether.Trainer(model=dead).adev(agent, ["x"])
    (rollout,) = report.rollouts
    problems = " ".join(report.all_problems)
    assert "made no LLM call" not in problems, problems
    assert "the model backend failed" in problems and dead.removesuffix("/v1") in problems, problems
    failed_calls = [s for s in rollout.spans if s.kind == SpanKind.LLM]
    assert len(failed_calls) == 1 and failed_calls[0].attributes[spans.ERROR], "the failed call is on record"
    assert not rollout.transitions, "a failed call is never a transition"
    assert "LLM error" in str(rollout)


async def test_emit_reward_scores_a_rollout_without_reward_function() -> None:
    agent = tether.wrap({"name": "a", "calls": 1, "emit": 0.5})
    (rollout,) = (await _dev(agent, ["x"])).rollouts
    assert rollout.reward == 0.5
    assert any(s.kind == SpanKind.REWARD and s.attributes[spans.REWARD_VALUE] == 0.5 for s in rollout.spans)


async def test_a_reward_mapping_scores_each_sub_agent_and_the_rollout_by_their_mean() -> None:
    # a mapping names sub-agents or policies (here the policy "main" that serves solver; dev runs a policy map
    # on a remote model)
    agent = tether.wrap(
        {"name": "solver", "calls": 2},
        reward=lambda t, o: {"solver": 1.0, "main": 0.25},
        optimize={"main": ["solver"]},
    )
    report = await _dev(agent, ["x", "y"])
    rollout = report.rollouts[0]
    assert rollout.reward == 0.625  # the mean of the mapping's values
    finals = {
        s.attributes[spans.REWARD_TARGET]: s.attributes[spans.REWARD_VALUE]
        for s in rollout.spans
        if s.kind == SpanKind.REWARD and s.attributes.get(spans.REWARD_FINAL)
    }
    assert finals == {"solver": 1.0, "main": 0.25}
    assert [(t.target, t.target_reward) for t in rollout.transitions] == [("solver", 1.0)] * 2
    metrics = report.metrics()
    assert metrics["mean_reward"] == 0.625 and metrics["mean_reward/main"] == 0.25
    assert metrics["mean_reward/solver"] == 1.0


@pytest.mark.parametrize(
    ("mapping", "why"),
    [({"solver": math.nan}, "reward= returned {'solver': nan}"), ({}, "reward= returned an empty mapping")],
)
async def test_a_bad_reward_mapping_fails_the_rollout_with_what_is_wrong(mapping: Any, why: str) -> None:
    report = await _dev(tether.wrap({"name": "solver", "calls": 1}, reward=lambda t, o: mapping), ["x"])
    assert report.rollouts[0].status == RolloutStatus.FAILED
    assert why in " ".join(report.all_problems)


async def test_dev_shows_each_calls_policy_and_advantage_under_the_credit_rule() -> None:
    agent = tether.wrap({"name": "solver", "calls": 2, "emit": 0.5, "emit_for": "solver"}, optimize=["solver"])
    report = await _dev(agent, ["x"], credit="per_call")
    (rollout,) = report.rollouts
    # one rollout: both calls are alone at their position and fall back to the task's 'solver' calls, whose
    # returns are 0.5 (the final reward) and 1.0 (the reward emitted for the latest call, plus the final one)
    assert [t.reward for t in rollout.transitions] == [0.5, 1.0]
    lines = [line for line in str(rollout).splitlines() if "LLM:" in line]
    assert lines[0].endswith("· policy=policy trains adv=-1.00"), lines
    assert lines[1].endswith("· policy=policy trains adv=+1.00"), lines
    assert report.notes == []


async def test_dev_repeats_tasks_into_groups_and_notes_a_rule_that_cannot_apply() -> None:
    seen: set[str] = set()

    def first_run_wins(task: str, output: Any) -> float:  # one rollout of each task scores 1, the other 0
        won = task not in seen
        seen.add(task)
        return float(won)

    report = await _dev(
        tether.wrap({"name": "a", "calls": 1}, reward=first_run_wins), ["x", "y"], 2, credit="per_call"
    )
    assert [r.rollout.task_id for r in report][::2] == [r.rollout.task_id for r in report][1::2]
    advantages = {r.rollout.rollout_id: r.transitions[0].advantage for r in report}
    assert sorted(advantages.values()) == pytest.approx([-1.0, -1.0, 1.0, 1.0], abs=1e-4)
    for r in report:
        assert (r.reward == 1.0) == (advantages[r.rollout.rollout_id] > 0)
    assert any("credit='per_call' found no emitted rewards" in n for n in report.notes)
    assert "note: credit='per_call' found no emitted rewards" in str(report)


def test_emit_reward_for_a_bad_agent_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"emit_reward\(agent=\.\.\.\) takes a sub-agent or policy name"):
        tether.emit_reward(1.0, agent="")


async def test_missing_reward_and_missing_llm_calls_are_reported() -> None:
    report = await _dev(tether.wrap({"name": "a", "calls": 0}), ["x"])
    problems = " ".join(report.all_problems)
    assert "has no reward" in problems and "made no LLM call" in problems


async def test_unknown_optimize_name_is_reported_with_captured_agents() -> None:
    report = await _dev(tether.wrap({"name": "solver", "calls": 1}, optimize=["writer"]), ["x"])
    assert report.problems == ["unknown sub-agent 'writer' in optimize=; captured agents are: solver"]


async def test_timeout_fails_the_attempt_and_retries_up_to_max_attempts(tmp_path: Path) -> None:
    def slow(request: dict[str, Any]) -> Reply:
        return text("late", delay_s=3.0)

    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with FakeLLM(handler=slow) as llm:
        trainer = tether.Trainer(model=llm.base_url, store=store_url, timeout_s=0.2, max_attempts=2)
        (rollout,) = (await trainer.adev(agent, ["x"])).rollouts
    assert rollout.status == RolloutStatus.FAILED and rollout.attempts == 2
    # the runner noticing its own timeout and the store's sweep end an attempt the same way
    assert rollout.error == "attempt timed out after 0.2 s"
    store = tether.open_store(store_url)
    try:
        attempts = await store.get_attempts(rollout.rollout.rollout_id)
    finally:
        await store.close()
    assert [a.status for a in attempts] == [AttemptStatus.TIMEOUT] * 2


async def test_rollouts_run_concurrently() -> None:
    def slow(request: dict[str, Any]) -> Reply:
        return text("ok", delay_s=0.3)

    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    async with FakeLLM(handler=slow) as llm:
        trainer = tether.Trainer(model=llm.base_url, n_runners=8)
        report = await trainer.adev(agent, [f"t{i}" for i in range(8)])
    assert all(r.status == RolloutStatus.SUCCEEDED for r in report)
    # every model call was in flight at once: the last one started before the first one ended
    calls = [s for r in report for s in r.spans if s.kind == SpanKind.LLM]
    assert len(calls) == 8
    assert max(s.start_time for s in calls) < min(s.start_time + s.attributes["latency_ms"] / 1000 for s in calls)


def test_emit_reward_outside_a_rollout_raises() -> None:
    with pytest.raises(RuntimeError, match="outside a tether rollout"):
        tether.emit_reward(1.0)


async def test_runner_sends_the_sampling_once_and_leaves_the_batcher_to_its_owner() -> None:
    """The rollout's sampling reaches every call through ``proxy.attempt``, each call with its own seed (from
    the sampling's, or a seeded run's rollout's, and the call's index); the runner flushes the batcher it is
    given before ending the attempt, and never closes it."""
    store = MemoryStore()
    async with FakeLLM(handler=_echo) as llm, SpanBatcher(store, max_delay_s=3600) as batcher:
        async with ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy:
            await store.add_resources(llm=LLMEndpoint(proxy.url, sampling={"temperature": 0.0, "seed": 11}))
            rollout, _seeded = await store.enqueue(
                [RolloutSpec(input="q"), RolloutSpec(input="q", metadata={spans.SEED_METADATA: 5})]
            )
            agent = tether.wrap({"name": "a", "calls": 2}, reward=lambda t, o: 1.0)
            async with Runner(agent, store, proxy, batcher=batcher, concurrency=1) as runner:
                stats = await runner.run_until_idle()
            assert stats.succeeded == 2
            (attempt,) = await store.get_attempts(rollout.rollout_id)
            assert len(await store.get_spans(attempt.attempt_id)) == 2  # flushed before the attempt ended
            batcher.submit(Span(rollout.rollout_id, attempt.attempt_id, SpanKind.OTHER, "after"))  # still open
    attempt_seed = derive_seed(5, 1)  # the rollout's seed and the attempt's index
    seeds = [derive_seed(11, 0), derive_seed(11, 1), derive_seed(attempt_seed, 0), derive_seed(attempt_seed, 1)]
    assert [(r["temperature"], r["seed"]) for r in llm.chat_requests] == [(0.0, seed) for seed in seeds]
    assert len(await store.get_spans(attempt.attempt_id)) == 3


async def test_the_runner_alone_decides_the_url_each_rollout_calls() -> None:
    """A published resources version names no URL; each rollout's agent gets an endpoint at its attempt's URL
    (with the version's sampling), and only that rollout's calls reach it."""
    urls: dict[str, str] = {}

    async def run(agent: dict[str, Any], task: Any, resources: Resources) -> Any:
        assert resources.llm is not None and resources.llm.sampling["temperature"] == 0.5
        urls[str(task)] = resources.llm.base_url
        return await _DictAgentAdapter().run(agent, task, resources)

    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0, run=run)
    async with FakeLLM(handler=_echo) as llm:
        trainer = tether.Trainer(model=llm.base_url, progress=False)
        async with trainer.session(agent, trains=False) as session:
            batch = await session.run_batch(["x", "y"], sampling={"temperature": 0.5}, harvest=False)
            published = await session.store.get_resources()
            proxy_url = session.proxy.url
    assert published is not None and published.llm is not None and published.llm.base_url == ""
    assert batch.failed == 0 and len(batch.results) == 2
    for result in batch.results:
        attempt = result.spans[0].attempt_id
        assert urls[result.rollout.input] == f"{proxy_url}/r/{result.rollout.rollout_id}/{attempt}/v1"


async def _run_until_idle(
    store: Store,
    agent: WrappedAgent,
    rollout_ids: list[str] | None = None,
    handler: Any = _echo,
    retries: int = 3,
    outage_s: float = 60.0,
) -> RunnerStats:
    """One runner over ``store`` until idle, its calls answered by the fake LLM through a proxy."""
    async with FakeLLM(handler=handler) as llm, SpanBatcher(store, retries=retries, outage_s=outage_s) as batcher:
        async with ProxyServer(RemoteBackend(llm.base_url), batcher=batcher, close_backend=True) as proxy:
            await store.add_resources(llm=LLMEndpoint(proxy.url))
            async with Runner(agent, store, proxy, batcher=batcher, poll_s=0.01, outage_s=outage_s) as runner:
                return await (runner.run_until_idle(rollout_ids) if rollout_ids else runner.run_until_idle())


async def test_an_outcome_is_recorded_once_the_store_is_back(tmp_path: Path) -> None:
    """Issue 26 item 3: the file locked by another process for 1 s while the attempt ends: it is retried and
    recorded, not failed (before, the attempt was left running until the sweep, then run again)."""
    path = tmp_path / "s.db"
    store = SqliteStore(path, busy_timeout_s=0.05)
    (rollout,) = await store.enqueue([RolloutSpec(input="q", max_attempts=2)])
    scored: list[float] = []

    def lock_the_file_once(task: Any, output: Any) -> float:
        if not scored:
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            threading.Timer(1.0, lambda: (other.execute("ROLLBACK"), other.close())).start()
        scored.append(1.0)
        return 1.0

    try:
        stats = await _run_until_idle(store, tether.wrap({"name": "a", "calls": 1}, reward=lock_the_file_once))
        done = await store.get_rollout(rollout.rollout_id)
        attempts = await store.get_attempts(rollout.rollout_id)
    finally:
        await store.close()
    assert (done.status, done.attempt_count, done.reward) == (RolloutStatus.SUCCEEDED, 1, 1.0)
    assert [a.status for a in attempts] == [AttemptStatus.SUCCEEDED] and (stats.succeeded, stats.failed) == (1, 0)


async def test_run_until_idle_sweeps_a_dead_workers_stale_rollout_and_runs_it() -> None:
    store = MemoryStore()
    (lost,) = await store.enqueue([RolloutSpec(input="q", max_attempts=2, heartbeat_timeout_s=0.05)])
    assert await store.dequeue("a-runner-that-died")
    await asyncio.sleep(0.1)  # its heartbeat is stale by now
    stats = await _run_until_idle(store, tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0))
    assert stats.succeeded == 1
    done = await store.get_rollout(lost.rollout_id)
    assert (done.status, done.attempt_count) == (RolloutStatus.SUCCEEDED, 2)


async def test_run_until_idle_waits_for_its_rollouts_held_by_a_dead_worker() -> None:
    store = MemoryStore()
    retried, ended = await store.enqueue(
        [
            RolloutSpec(input="q", max_attempts=2, heartbeat_timeout_s=0.3),
            RolloutSpec(input="q", heartbeat_timeout_s=0.3),
        ]
    )
    assert len(await store.dequeue("a-runner-that-died", limit=2)) == 2  # claimed, then its process died
    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    stats = await _run_until_idle(store, agent, [retried.rollout_id, ended.rollout_id])
    assert stats.succeeded == 1
    again = await store.get_rollout(retried.rollout_id)
    assert (again.status, again.attempt_count) == (RolloutStatus.SUCCEEDED, 2)
    failed = await store.get_rollout(ended.rollout_id)
    assert failed.status == RolloutStatus.FAILED and "no heartbeat for 0.3 s" in (failed.error or "")


async def test_the_runner_keeps_a_slow_attempt_alive() -> None:
    def slow(request: dict[str, Any]) -> Reply:
        return text("late", delay_s=1.0)  # no span arrives for a second: only the runner's heartbeats

    store = MemoryStore()
    (rollout,) = await store.enqueue([RolloutSpec(input="q", heartbeat_timeout_s=0.3)])
    stats = await _run_until_idle(
        store, tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0), handler=slow
    )
    assert stats.succeeded == 1
    done = await store.get_rollout(rollout.rollout_id)
    assert (done.status, done.attempt_count) == (RolloutStatus.SUCCEEDED, 1)


async def test_run_until_idle_waits_until_an_outcome_it_could_not_record_is_swept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path, busy_timeout_s=0.05)
    (rollout,) = await store.enqueue([RolloutSpec(input="q", max_attempts=2, heartbeat_timeout_s=0.3)])
    scored: list[float] = []

    def lock_the_file_once(task: Any, output: Any) -> float:
        if not scored:  # another process holds the write lock while the first attempt ends
            other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")
            threading.Timer(1.0, lambda: (other.execute("ROLLBACK"), other.close())).start()
        scored.append(1.0)
        return 1.0

    try:
        agent = tether.wrap({"name": "a", "calls": 1}, reward=lock_the_file_once)
        stats = await _run_until_idle(store, agent, retries=0, outage_s=0.2)  # locked past the retries
        done = await store.get_rollout(rollout.rollout_id)
        attempts = await store.get_attempts(rollout.rollout_id)
    finally:
        await store.close()
    assert (done.status, done.attempt_count) == (RolloutStatus.SUCCEEDED, 2)
    assert "could not record the failure of attempt" in caplog.text  # the store refused both outcomes
    assert [a.status for a in attempts] == [AttemptStatus.TIMEOUT, AttemptStatus.SUCCEEDED]  # swept, then rerun
    assert (stats.succeeded, stats.failed) == (1, 1)
