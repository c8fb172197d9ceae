"""tether.RayRunners: rollouts in Ray actors on a local Ray head, against the fake LLM.

A plain openai-function agent runs ``Trainer.dev`` through 4 actors (each with its own proxy and adapter
instrumentation) with the store served over HTTP and on PostgreSQL, and records what an in-process run
records; work spreads over the actors; an actor killed mid-run loses no rollout.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import plain_calc_agent
import pytest
from recorded import recorded

import tether
from tether import spans
from tether.models.remote import RemoteBackend
from tether.proxy import system_messages
from tether.testing.fake_llm import FakeLLM, Reply, text, tool_call
from tether.types import AttemptStatus, RolloutStatus

pytestmark = pytest.mark.usefixtures("ray_head")

TASKS = [f"What is {i} + {i + 3}?" for i in range(12)]


def _reply(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return text(f"The answer is {messages[-1]['content']}")
    question = next(m["content"] for m in messages if m["role"] == "user")
    expression = question.removeprefix("What is ").rstrip("?")
    return tool_call("calculator", {"expression": expression}, id=f"call-{expression.replace(' ', '')}")


def _slow_reply(request: dict[str, Any]) -> Reply:
    reply = _reply(request)
    reply.delay_s = 0.4
    return reply


def _agent() -> tether.WrappedAgent:
    def reward(task: str, output: str) -> float:
        left, _, right = task.removeprefix("What is ").rstrip("?").split()
        return 1.0 if output.endswith(str(int(left) + int(right))) else 0.0

    return tether.wrap(plain_calc_agent.solve, reward=reward)


def _backend(llm: FakeLLM) -> RemoteBackend:
    return RemoteBackend(llm.base_url, return_token_ids=True, logprobs=True)


async def _in_process(llm: FakeLLM) -> dict[Any, Any]:
    backend = _backend(llm)
    try:
        return recorded(await tether.Trainer(model=backend, n_runners=4).adev(_agent(), TASKS))
    finally:
        await backend.close()


@pytest.mark.parametrize("store", ["memory", "postgresql"])
async def test_dev_through_four_actors_records_what_an_in_process_run_records(
    store: str, request: pytest.FixtureRequest
) -> None:
    url = "memory:"  # served to the actors over HTTP by the session
    if store == "postgresql":
        url = request.getfixturevalue("pg_server").new_database()
    async with FakeLLM(handler=_reply) as llm:
        expected = await _in_process(llm)
        backend = _backend(llm)
        try:
            trainer = tether.Trainer(model=backend, store=url, runners=tether.RayRunners(n=4))
            report = await trainer.adev(_agent(), TASKS)
        finally:
            await backend.close()
    got = recorded(report)
    assert all(status == RolloutStatus.SUCCEEDED for status, *_ in got.values())
    assert all(reward == 1.0 for _, _, reward, *_ in got.values())
    # token ids from the trainer's backend reach the actors' proxies and their spans
    llm_spans = [s for r in report for s in r.spans if s.name == spans.LLM_CALL]
    assert llm_spans and all(s.attributes["token_ids_available"] for s in llm_spans)
    assert got == expected


async def test_rollouts_spread_over_the_actors() -> None:
    async with FakeLLM(handler=_slow_reply) as llm:
        backend = _backend(llm)
        trainer = tether.Trainer(model=backend, runners=tether.RayRunners(n=4))
        try:
            async with trainer.session(_agent()) as session:
                batch = await session.run_batch(TASKS[:8], harvest=False)
                workers = [(await session.store.get_attempts(r.rollout_id))[-1].worker_id for r in batch.rollouts]
                pool_workers = set(session.runner.worker_ids)  # type: ignore[union-attr]
        finally:
            await backend.close()
    assert batch.failed == 0
    counts = {w: workers.count(w) for w in set(workers)}
    assert set(counts) == pool_workers, counts  # every actor ran some
    assert max(counts.values()) <= 3, counts  # one at a time each: none hogs the queue


async def test_an_actor_killed_mid_run_loses_no_rollout(ray_head: Any) -> None:
    async with FakeLLM(handler=_slow_reply) as llm:
        backend = _backend(llm)
        trainer = tether.Trainer(
            model=backend, runners=tether.RayRunners(n=2), heartbeat_timeout_s=2.0, max_attempts=2
        )
        try:
            async with trainer.session(_agent()) as session:
                pool: Any = session.runner
                running = asyncio.create_task(session.run_batch(TASKS[:6], harvest=False))
                victim = None
                for _ in range(200):  # until an actor holds a rollout
                    await asyncio.sleep(0.05)
                    held = await session.store.list_rollouts(status=RolloutStatus.RUNNING)
                    if held:
                        (attempt,) = await session.store.get_attempts(held[0].rollout_id)
                        victim = next(a for a in pool.actors if a.worker_id == attempt.worker_id)
                        break
                assert victim is not None, "no actor took a rollout"
                ray_head.kill(victim.handle)
                batch = await asyncio.wait_for(running, 60)
                attempts = {r.rollout_id: await session.store.get_attempts(r.rollout_id) for r in batch.rollouts}
                restarts = pool.restarts
        finally:
            await backend.close()
    assert batch.failed == 0 and batch.mean_reward == 1.0
    retried = [a for a in attempts.values() if len(a) == 2]
    assert retried, "the killed actor's rollout was not retried"
    for first, second in retried:
        assert first.worker_id == victim.worker_id and first.status == AttemptStatus.TIMEOUT
        assert second.status == AttemptStatus.SUCCEEDED and second.worker_id != victim.worker_id
    assert restarts == 1  # the pool replaced the dead actor


async def test_actors_swap_a_system_message_candidate_in_as_the_trainers_proxy_does() -> None:
    """APO's in-flight system message (tether.proxy.system_messages) is a rule in the rollout's resources: each
    actor's
    runner reads it from the store and opens the attempt on its own proxy with it."""
    original = "You are a calculator agent. Use the calculator tool."
    candidate = "You are a careful calculator agent. Always call the calculator tool first."
    prompts = system_messages.templates("solve", original)
    name = system_messages.prompt_name("solve")
    prompts[name] = dataclasses.replace(prompts[name], template=candidate)  # the rule in its fields
    async with FakeLLM(handler=_reply) as llm:
        backend = _backend(llm)
        try:
            trainer = tether.Trainer(model=backend, runners=tether.RayRunners(n=2))
            async with trainer.session(_agent()) as session:
                batch = await session.run_batch(TASKS[:4], prompts=prompts, harvest=False)
        finally:
            await backend.close()
    assert batch.failed == 0 and batch.mean_reward == 1.0
    assert {r["messages"][0]["content"] for r in llm.chat_requests} == {candidate}
    calls = [s for r in batch.results for s in r.spans if s.name == spans.LLM_CALL]
    assert len(calls) == 8 and all(s.agent_name == "solve" for s in calls)
    for span in calls:
        assert span.attributes[spans.SYSTEM_MESSAGE_REPLACED]["original"] == original
        assert span.attributes["request"]["messages"][0]["content"] == candidate
