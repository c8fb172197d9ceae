"""The store conformance suite's tests of ``enqueue``, ``get_rollout``, ``list_rollouts`` and ``dequeue``, and
of the numbers every backend refuses (mixed into ``StoreConformance``)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from tether.store.base import Store
from tether.store.errors import InvalidInput, NotFound, StoreError
from tether.testing.store_conformance._base import ConformanceBase, span, spec
from tether.types import (
    AttemptStatus,
    Mode,
    Rollout,
    RolloutSpec,
    RolloutStatus,
)


class QueueConformance(ConformanceBase):
    """Enqueueing, reading back, listing and claiming rollouts."""

    # -- enqueue / get / list -----------------------------------------------------------------------------

    async def test_enqueue_many_in_order(self, store: Store) -> None:
        specs = [spec(i, metadata={"i": i}, task_id=f"t{i}" if i % 2 else None) for i in range(50)]
        rollouts = await store.enqueue(specs)
        assert [r.input for r in rollouts] == [s.input for s in specs]
        assert len({r.rollout_id for r in rollouts}) == 50
        for i, r in enumerate(rollouts):
            assert r.status == RolloutStatus.QUEUED and r.attempt_count == 0
            assert r.metadata == {"i": i}
            assert r.task_id == (f"t{i}" if i % 2 else r.rollout_id)
        listed = await store.list_rollouts()
        assert [r.rollout_id for r in listed] == [r.rollout_id for r in rollouts]
        assert await store.enqueue([]) == []

    async def test_enqueue_round_trips_every_field(self, store: Store) -> None:
        (r,) = await store.enqueue(
            [
                RolloutSpec(
                    input=["a", {"b": 1}],
                    task_id="task-7",
                    mode=Mode.VAL,
                    metadata={"k": [1, 2]},
                    max_attempts=3,
                    timeout_s=12.5,
                    heartbeat_timeout_s=4.0,
                    resources_version=2,
                )
            ]
        )
        got = await store.get_rollout(r.rollout_id)
        assert got == r
        assert (got.input, got.task_id, got.mode, got.metadata) == (
            ["a", {"b": 1}],
            "task-7",
            Mode.VAL,
            {"k": [1, 2]},
        )
        assert (got.max_attempts, got.timeout_s, got.heartbeat_timeout_s, got.resources_version) == (
            3,
            12.5,
            4.0,
            2,
        )
        assert got.output is None and got.reward is None and got.error is None and got.finished_at is None

    @pytest.mark.parametrize(
        "bad",
        [
            {"max_attempts": 0},
            {"timeout_s": -1.0},
            {"heartbeat_timeout_s": 0},
            {"mode": "nope"},
            {"input": {"x": object()}},
            {"metadata": {"x": {1, 2}}},
        ],
    )
    async def test_enqueue_bad_spec_adds_nothing(self, store: Store, bad: dict[str, Any]) -> None:
        await store.enqueue([spec(0)])
        before = await self._snapshot(store)
        with pytest.raises(InvalidInput):
            await store.enqueue([spec(1), RolloutSpec(**{"input": 2, **bad}), spec(3)])
        assert await self._snapshot(store) == before

    async def test_enqueue_rejects_non_specs(self, store: Store) -> None:
        with pytest.raises(InvalidInput):
            await store.enqueue([{"input": 1}])  # type: ignore[list-item]  # deliberately wrong
        assert await store.list_rollouts() == []

    async def test_get_unknown_rollout(self, store: Store) -> None:
        with pytest.raises(NotFound) as info:
            await store.get_rollout("ro-missing")
        assert isinstance(info.value, KeyError) and isinstance(info.value, StoreError)
        with pytest.raises(NotFound):
            await store.get_attempts("ro-missing")

    async def test_list_rollouts_filters(self, store: Store) -> None:
        train = await store.enqueue([spec(i) for i in range(4)])
        val = await store.enqueue([spec(i, mode=Mode.VAL) for i in range(3)])
        (running, _), (done_r, done_a) = await store.dequeue("w", limit=2)
        await store.finish_attempt(done_a.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)

        def ids(rollouts: list[Rollout]) -> list[str]:
            return [r.rollout_id for r in rollouts]

        assert ids(await store.list_rollouts(mode=Mode.VAL)) == ids(val)
        assert ids(await store.list_rollouts(mode=Mode.TRAIN)) == ids(train)
        assert ids(await store.list_rollouts(status=RolloutStatus.RUNNING)) == [running.rollout_id]
        assert ids(await store.list_rollouts(status=RolloutStatus.SUCCEEDED)) == [done_r.rollout_id]
        assert ids(await store.list_rollouts(status=RolloutStatus.QUEUED, mode=Mode.TRAIN)) == ids(train[2:])
        assert ids(await store.list_rollouts(limit=3)) == ids(train[:3])
        wanted = [val[1].rollout_id, "ro-unknown", train[0].rollout_id, val[1].rollout_id]
        assert ids(await store.list_rollouts(rollout_ids=wanted)) == [train[0].rollout_id, val[1].rollout_id]
        assert ids(await store.list_rollouts(rollout_ids=wanted, mode=Mode.VAL)) == [val[1].rollout_id]
        assert await store.list_rollouts(rollout_ids=[]) == []

    async def test_list_rollouts_limit(self, store: Store) -> None:
        rollouts = await store.enqueue([spec(i) for i in range(3)])
        ids = [r.rollout_id for r in rollouts]
        assert await store.list_rollouts(limit=0) == []
        assert [r.rollout_id for r in await store.list_rollouts(limit=2)] == ids[:2]
        assert [r.rollout_id for r in await store.list_rollouts(limit=2**63 - 1)] == ids
        for bad in (-1, -(2**63), 2**63, 10**30, 1.5, "2", True):
            with pytest.raises(InvalidInput, match="limit"):
                await store.list_rollouts(limit=bad)  # type: ignore[arg-type]  # deliberately wrong

    async def test_numbers_out_of_range_are_invalid_input(self, store: Store) -> None:
        """Every backend refuses the same numbers (what SQLite cannot hold: beyond 64-bit integers or
        floats) with ``InvalidInput``, and changes nothing."""
        rollout, attempt = await self._running(store)
        await store.add_spans([span(rollout.rollout_id, attempt.attempt_id)])
        aid = attempt.attempt_id
        before = await self._snapshot(store)
        calls: list[Any] = [
            lambda: store.get_spans(aid, since=2**63),
            lambda: store.get_spans(aid, since=-(2**63) - 1),
            lambda: store.get_spans(aid, since="1"),  # type: ignore[arg-type]
            lambda: store.get_resources(10**30),
            lambda: store.get_resources(-(10**30)),
            lambda: store.dequeue("w", limit=10**30),
            lambda: store.enqueue([spec(1, max_attempts=2**63)]),
            lambda: store.enqueue([spec(1, resources_version=10**30)]),
            lambda: store.enqueue([spec(1, timeout_s=10**400)]),
            lambda: store.enqueue([spec(1, heartbeat_timeout_s=math.inf)]),
            lambda: store.requeue_stale(now=10**400),
            lambda: store.requeue_stale(now=math.nan),
            lambda: store.finish_attempt(aid, AttemptStatus.SUCCEEDED, reward=10**400),
            lambda: store.add_spans([span(rollout.rollout_id, aid, start_time=10**400)]),
            lambda: store.add_spans([span(rollout.rollout_id, aid, end_time=math.nan)]),
            lambda: store.add_spans([span(rollout.rollout_id, aid, start_time="now")]),
        ]
        for i, call in enumerate(calls):
            with pytest.raises(InvalidInput):
                await call()
                pytest.fail(f"call #{i} was accepted")
        assert await self._snapshot(store) == before
        assert await store.get_spans(aid, since=2**63 - 1) == []
        assert len(await store.get_spans(aid, since=-(2**63))) == 1
        assert await store.dequeue("w", limit=2**63 - 1) == []
        assert await store.dequeue("w", limit=-5) == []
        with pytest.raises(NotFound):
            await store.get_resources(2**63 - 1)

    # -- dequeue ------------------------------------------------------------------------------------------

    async def test_dequeue_oldest_first_with_limit(self, store: Store) -> None:
        assert await store.dequeue("w") == []
        rollouts = await store.enqueue([spec(i) for i in range(5)])
        first = await store.dequeue("w1", limit=3)
        second = await store.dequeue("w2", limit=3)
        assert [r.rollout_id for r, _ in first + second] == [r.rollout_id for r in rollouts]
        assert await store.dequeue("w3") == []
        for (r, a), worker in zip(first + second, ["w1"] * 3 + ["w2"] * 2, strict=True):
            assert r.status == RolloutStatus.RUNNING and r.attempt_count == 1
            assert (a.rollout_id, a.index, a.worker_id, a.status) == (
                r.rollout_id,
                1,
                worker,
                AttemptStatus.RUNNING,
            )
            assert a.finished_at is None
            assert await store.get_attempts(r.rollout_id) == [a]
            assert await store.get_rollout(r.rollout_id) == r

    async def test_requeued_rollout_goes_to_the_back(self, store: Store) -> None:
        first, attempt = await self._running(store, max_attempts=2)
        later = await store.enqueue([spec(1), spec(2)])
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.FAILED, error="retry me")
        claimed = await store.dequeue("w", limit=5)
        assert [r.rollout_id for r, _ in claimed] == [later[0].rollout_id, later[1].rollout_id, first.rollout_id]
        assert [a.index for _, a in claimed] == [1, 1, 2]

    async def test_concurrent_dequeuers_never_share_a_rollout(self, store: Store) -> None:
        rollouts = await store.enqueue([spec(i) for i in range(60)])

        async def worker(name: str) -> list[str]:
            got: list[str] = []
            while True:
                claimed = await store.dequeue(name, limit=2)
                if not claimed:
                    return got
                got += [r.rollout_id for r, _ in claimed]
                await asyncio.sleep(0)

        results = await asyncio.gather(*(worker(f"w{i}") for i in range(8)))
        claimed = [rid for got in results for rid in got]
        assert sorted(claimed) == sorted(r.rollout_id for r in rollouts)
        for r in rollouts:
            assert len(await store.get_attempts(r.rollout_id)) == 1
