"""The runner's life over real HTTP: the URL each rollout calls, the sampling it sends, attempts kept alive, and
``run_until_idle`` across a store outage and dead workers (the toy dict agents of ``runner_agents.py``)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runner_agents import DictAgentAdapter, dict_agent_plugins, echo

import tether
from tether import spans
from tether._seeds import derive_seed
from tether.capture.span_batcher import SpanBatcher
from tether.models.remote import RemoteBackend
from tether.plugin.wrap import WrappedAgent
from tether.proxy import ProxyServer
from tether.store import Store
from tether.store.memory import MemoryStore
from tether.store.sqlite import SqliteStore
from tether.testing.fake_llm import FakeLLM, Reply, text
from tether.training.engine.runner import Runner, RunnerStats
from tether.types import AttemptStatus, LLMEndpoint, Resources, RolloutSpec, RolloutStatus, Span, SpanKind


@pytest.fixture(autouse=True)
def _plugins() -> Iterator[None]:
    with dict_agent_plugins():
        yield


async def test_runner_sends_the_sampling_once_and_leaves_the_batcher_to_its_owner() -> None:
    """The rollout's sampling reaches every call through ``proxy.attempt``, each call with its own seed (from
    the sampling's, or a seeded run's rollout's, and the call's index); the runner flushes the batcher it is
    given before ending the attempt, and never closes it."""
    store = MemoryStore()
    async with FakeLLM(handler=echo) as llm, SpanBatcher(store, max_delay_s=3600) as batcher:
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
        return await DictAgentAdapter().run(agent, task, resources)

    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0, run=run)
    async with FakeLLM(handler=echo) as llm:
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
    handler: Any = echo,
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
