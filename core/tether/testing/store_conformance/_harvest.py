"""The store conformance suite's tests of ``add_resources``/``get_resources``, ``wait_for_rollouts`` and
``harvest`` (mixed into ``StoreConformance``)."""

from __future__ import annotations

import asyncio

import pytest

from tether.store.base import Store
from tether.store.errors import InvalidInput, InvalidTransition, NotFound
from tether.testing.store_conformance._base import ConformanceBase, span, spec
from tether.types import (
    AttemptStatus,
    LLMEndpoint,
    PromptTemplate,
    RolloutStatus,
)


class HarvestConformance(ConformanceBase):
    """Versioned resources, waiting for rollouts to finish, and harvesting finished ones."""

    # -- resources ----------------------------------------------------------------------------------------

    async def test_versioned_resources(self, store: Store) -> None:
        assert await store.get_resources() is None
        llm = LLMEndpoint(base_url="http://127.0.0.1:1/v1", model="m", sampling={"temperature": 0.7})
        v1 = await store.add_resources(llm=llm)
        assert v1.version == 1 and v1.llm == llm and v1.prompts == {}
        prompts = {"system": PromptTemplate("You are {role}."), "j": PromptTemplate("{{ x }}", engine="jinja")}
        v2 = await store.add_resources(prompts=prompts)
        assert v2.version == 2 and v2.llm == llm and v2.prompts == prompts  # llm carried over
        llm3 = LLMEndpoint(base_url="http://127.0.0.1:2/v1")
        v3 = await store.add_resources(llm=llm3)
        assert v3.llm == llm3 and v3.prompts == prompts  # prompts carried over
        v4 = await store.add_resources(prompts={})
        assert v4.prompts == {} and v4.llm == llm3
        assert await store.get_resources() == v4
        assert await store.get_resources(1) == v1
        assert await store.get_resources(2) == v2
        for version in (0, 5, -1):
            with pytest.raises(NotFound):
                await store.get_resources(version)

    # -- wait_for_rollouts --------------------------------------------------------------------------------

    async def test_wait_for_rollouts(self, store: Store) -> None:
        await store.enqueue([spec(1), spec(2)])
        (r1, a1), (r2, a2) = await store.dequeue("w", limit=2)

        async def finish_later() -> None:
            await asyncio.sleep(0.1)
            await store.finish_attempt(a1.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)
            await asyncio.sleep(0.1)
            await store.finish_attempt(a2.attempt_id, AttemptStatus.FAILED, error="x")

        task = asyncio.create_task(finish_later())
        done = await store.wait_for_rollouts([r1.rollout_id, r2.rollout_id], timeout=30, poll_s=0.01)
        await task
        assert {r.rollout_id: r.status for r in done} == {
            r1.rollout_id: RolloutStatus.SUCCEEDED,
            r2.rollout_id: RolloutStatus.FAILED,
        }

    async def test_wait_for_rollouts_times_out_with_the_finished_ones(self, store: Store) -> None:
        await store.enqueue([spec(1), spec(2)])
        (r1, a1), (r2, _) = await store.dequeue("w", limit=2)
        await store.finish_attempt(a1.attempt_id, AttemptStatus.SUCCEEDED)
        done = await store.wait_for_rollouts([r1.rollout_id, r2.rollout_id], timeout=0.2, poll_s=0.01)
        assert [r.rollout_id for r in done] == [r1.rollout_id]

    # -- harvest ------------------------------------------------------------------------------------------

    async def test_harvest_all_finished_and_release(self, store: Store) -> None:
        r1, a1 = await self._running(store)
        r2, a2 = await self._running(store, max_attempts=2)
        r3, _ = await self._running(store)
        await store.add_spans([span(r1.rollout_id, a1.attempt_id, "x"), span(r1.rollout_id, a1.attempt_id, "y")])
        await store.finish_attempt(a1.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0, output="done")
        await store.finish_attempt(a2.attempt_id, AttemptStatus.FAILED, error="e1")
        ((_, a2b),) = await store.dequeue("w")
        await store.add_spans([span(r2.rollout_id, a2b.attempt_id, "z")])
        await store.finish_attempt(a2b.attempt_id, AttemptStatus.FAILED, error="e2")
        (queued,) = await store.enqueue([spec(9)])

        harvested = await store.harvest()
        by_id = {h.rollout.rollout_id: h for h in harvested}
        assert set(by_id) == {r1.rollout_id, r2.rollout_id}
        h1, h2 = by_id[r1.rollout_id], by_id[r2.rollout_id]
        assert (h1.rollout.status, h1.rollout.reward, h1.rollout.output) == (RolloutStatus.SUCCEEDED, 1.0, "done")
        assert [a.attempt_id for a in h1.attempts] == [a1.attempt_id]
        assert [(s.name, s.sequence) for s in h1.spans] == [("x", 0), ("y", 1)]
        assert [a.attempt_id for a in h2.attempts] == [a2.attempt_id, a2b.attempt_id]
        assert [s.name for s in h2.spans] == ["z"] and h2.rollout.status == RolloutStatus.FAILED
        type(h1).from_dict(h1.to_dict())  # Harvested round-trips through JSON-ready dicts

        for rid, aid in ((r1.rollout_id, a1.attempt_id), (r2.rollout_id, a2b.attempt_id)):
            with pytest.raises(NotFound):
                await store.get_rollout(rid)
            with pytest.raises(NotFound):
                await store.get_attempts(rid)
            with pytest.raises(NotFound):
                await store.get_spans(aid)
            with pytest.raises(NotFound):
                await store.harvest([rid])
        with pytest.raises(InvalidInput):
            await store.add_spans([span(r1.rollout_id, a1.attempt_id)])
        remaining = {r.rollout_id for r in await store.list_rollouts()}
        assert remaining == {r3.rollout_id, queued.rollout_id}
        assert await store.harvest() == []

    async def test_harvest_refuses_unfinished_and_unknown(self, store: Store) -> None:
        r1, a1 = await self._running(store)
        r2, _ = await self._running(store)
        (queued,) = await store.enqueue([spec(3)])
        await store.finish_attempt(a1.attempt_id, AttemptStatus.SUCCEEDED)
        before = await self._snapshot(store)
        for ids in ([r1.rollout_id, r2.rollout_id], [r1.rollout_id, queued.rollout_id]):
            with pytest.raises(InvalidTransition):
                await store.harvest(ids)
        with pytest.raises(NotFound):
            await store.harvest([r1.rollout_id, "ro-missing"])
        assert await self._snapshot(store) == before
        (h,) = await store.harvest([r1.rollout_id, r1.rollout_id])
        assert h.rollout.rollout_id == r1.rollout_id
        assert await store.harvest([]) == []

    async def test_harvest_cancelled(self, store: Store) -> None:
        (queued,) = await store.enqueue([spec(1)])
        await store.cancel_rollout(queued.rollout_id)
        (h,) = await store.harvest([queued.rollout_id])
        assert h.rollout.status == RolloutStatus.CANCELLED and h.attempts == [] and h.spans == []
