"""The store conformance suite's tests of ``Store.query_rollouts`` and ``Store.count_rollouts`` (mixed into
``StoreConformance``): every order and filter against the same pages computed from ``list_rollouts``, walked
page by page with the cursor and jumped into with an offset."""

from __future__ import annotations

from typing import Any

import pytest

from tether.store.base import Store
from tether.store.errors import InvalidInput
from tether.store.rollout_query import RolloutQuery, VersionUsage, counts_of
from tether.types import AttemptStatus, Mode, Rollout, RolloutSpec, RolloutStatus


def _expected(rollouts: list[Rollout], order: str) -> list[str]:
    """``rollouts`` (oldest first) in ``order``, as the contract defines it."""
    position = {r.rollout_id: i for i, r in enumerate(rollouts)}
    rewarded = [r for r in rollouts if r.reward is not None]
    unrewarded = [r for r in rollouts if r.reward is None]
    if order == "newest":
        out = list(reversed(rollouts))
    elif order == "oldest":
        out = list(rollouts)
    elif order == "reward_desc":
        out = sorted(rewarded, key=lambda r: (-(r.reward or 0.0), -position[r.rollout_id])) + unrewarded[::-1]
    else:
        out = sorted(rewarded, key=lambda r: (r.reward or 0.0, position[r.rollout_id])) + unrewarded[::-1]
    return [r.rollout_id for r in out]


class QueryConformance:
    """Paged queries return what ``list_rollouts`` holds, filtered and ordered, with no row lost or repeated."""

    async def _mixed(self, store: Store) -> list[Rollout]:
        """24 rollouts: succeeded with tied and distinct rewards, failed, queued, running; two modes, 3 tasks."""
        specs = [
            RolloutSpec(input=i, task_id=f"task-{i % 3}", mode=Mode.VAL if i % 4 == 0 else Mode.TRAIN,
                        resources_version=i % 2)
            for i in range(24)
        ]  # fmt: skip
        await store.enqueue(specs)
        claimed = await store.dequeue("w", limit=20)
        for k, (_, attempt) in enumerate(claimed[:18]):
            if k % 5 == 4:
                await store.finish_attempt(attempt.attempt_id, AttemptStatus.FAILED, error="boom")
            else:
                reward = [0.5, 1.0, 0.0, 0.5][k % 4] if k % 7 else None
                await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=reward)
        return await store.list_rollouts()

    async def _walk(self, store: Store, limit: int, **filters: Any) -> list[str]:
        seen: list[str] = []
        after = None
        for _ in range(100):
            page = await store.query_rollouts(RolloutQuery(after=after, limit=limit, **filters))
            assert len(page.rollouts) <= limit
            seen += [r.rollout_id for r in page.rollouts]
            if page.next is None:
                return seen
            assert len(page.rollouts) == limit, "only a full page says more follow"
            after = page.next
        raise AssertionError("the cursor never reached the end")

    @pytest.mark.parametrize("order", ["newest", "oldest", "reward_desc", "reward_asc"])
    async def test_pages_walk_every_rollout_once_in_order(self, store: Store, order: str) -> None:
        everything = await self._mixed(store)
        expected = _expected(everything, order)
        for limit in (1, 5, 7, 50):
            assert await self._walk(store, limit, order=order) == expected
        page = await store.query_rollouts(RolloutQuery(order=order, limit=5))
        assert [r.rollout_id for r in page.rollouts] == expected[:5]
        listed = {r.rollout_id: r.to_dict() for r in everything}
        assert [r.to_dict() for r in page.rollouts] == [listed[i] for i in expected[:5]]
        for offset in (0, 3, 11, 17, 23, 24, 30):
            jumped = await store.query_rollouts(RolloutQuery(order=order, offset=offset, limit=4))
            assert [r.rollout_id for r in jumped.rollouts] == expected[offset : offset + 4]
            assert (jumped.next is None) == (offset + 4 >= len(expected))

    async def test_filters_match_list_rollouts(self, store: Store) -> None:
        everything = await self._mixed(store)
        cases: list[tuple[dict[str, Any], Any]] = [
            ({"status": RolloutStatus.FAILED}, lambda r: r.status == RolloutStatus.FAILED),
            ({"status": RolloutStatus.QUEUED}, lambda r: r.status == RolloutStatus.QUEUED),
            ({"mode": Mode.VAL}, lambda r: r.mode == Mode.VAL),
            ({"mode": Mode.TRAIN, "status": RolloutStatus.SUCCEEDED},
             lambda r: r.mode == Mode.TRAIN and r.status == RolloutStatus.SUCCEEDED),
            ({"task_id": "task-1", "resources_version": 1},
             lambda r: r.task_id == "task-1" and r.resources_version == 1),
            ({"min_reward": 0.5}, lambda r: r.reward is not None and r.reward >= 0.5),
            ({"min_reward": 0.1, "max_reward": 0.9}, lambda r: r.reward is not None and 0.1 <= r.reward <= 0.9),
            ({"search": "TASK-2"}, lambda r: r.task_id == "task-2"),
            ({"search": everything[5].rollout_id[3:12].upper()}, lambda r: r is everything[5]),
            ({"search": "%"}, lambda r: False),
            ({"search": "_"}, lambda r: False),
        ]  # fmt: skip
        for filters, keep in cases:
            for order in ("newest", "reward_desc"):
                expected = _expected([r for r in everything if keep(r)], order)
                assert await self._walk(store, 3, order=order, **filters) == expected, (filters, order)

    async def test_counts_by_status_and_mode(self, store: Store) -> None:
        assert await store.count_rollouts() == {s.value: 0 for s in RolloutStatus}
        everything = await self._mixed(store)
        assert await store.count_rollouts() == counts_of(everything)
        assert await store.count_rollouts(mode=Mode.VAL) == counts_of(everything, Mode.VAL)
        assert sum((await store.count_rollouts()).values()) == 24

    async def test_usage_by_version(self, store: Store) -> None:
        assert await store.usage_by_version() == {}
        everything = await self._mixed(store)
        await store.enqueue([RolloutSpec(input="no version", task_id="task-0")])
        usage = await store.usage_by_version()
        assert set(usage) == {0, 1}
        for version in (0, 1):
            rewards = [r.reward for r in everything if r.resources_version == version and r.reward is not None]
            assert usage[version].rollouts == 12
            assert usage[version].rewarded == len(rewards) > 0
            assert usage[version].reward_sum == pytest.approx(sum(rewards))
            assert usage[version].mean_reward == pytest.approx(sum(rewards) / len(rewards))
        assert VersionUsage(3, 0, 0.0).mean_reward is None

    async def test_a_cursor_survives_new_rollouts(self, store: Store) -> None:
        await self._mixed(store)
        first = await store.query_rollouts(RolloutQuery(order="newest", limit=10))
        await store.enqueue([RolloutSpec(input="late")])
        second = await store.query_rollouts(RolloutQuery(order="newest", limit=10, after=first.next))
        everything = await store.list_rollouts()
        assert [r.rollout_id for r in second.rollouts] == _expected(everything, "newest")[11:21]

    @pytest.mark.parametrize("order", ["newest", "oldest", "reward_desc", "reward_asc"])
    async def test_a_cursor_survives_the_harvest_of_its_row(self, store: Store, order: str) -> None:
        everything = await self._mixed(store)
        expected = _expected(everything, order)
        finished = {r.rollout_id for r in everything if r.status.finished}
        ends = [k for k in range(1, len(expected)) if expected[k - 1] in finished]  # pages ending on a finished
        cut = next(k for k in ends if k >= 6)
        first = await store.query_rollouts(RolloutQuery(order=order, limit=cut))
        assert first.rollouts[-1].rollout_id == expected[cut - 1]
        gone = [expected[cut - 1], *[i for i in expected[cut - 4 : cut - 1] if i in finished][:1]]
        await store.harvest(gone)
        rest = await self._walk_from(store, first.next, order=order, limit=5)
        assert rest == [i for i in expected[cut:] if i not in gone]

    async def _walk_from(self, store: Store, after: str | None, **query: Any) -> list[str]:
        seen: list[str] = []
        while after is not None:
            page = await store.query_rollouts(RolloutQuery(after=after, **query))
            seen += [r.rollout_id for r in page.rollouts]
            after = page.next
        return seen

    async def test_bad_queries_are_invalid_input(self, store: Store) -> None:
        await self._mixed(store)
        bad: list[dict[str, Any]] = [
            {"order": "sideways"}, {"limit": -1}, {"limit": 10**6}, {"offset": -3}, {"after": "garbage"},
            {"status": "nope"}, {"min_reward": float("nan")}, {"search": "x" * 1000},
            {"search": "task\x00"},  # (SQLite's LIKE ended the pattern at the NUL: every row matched)
        ]  # fmt: skip
        for fields in bad:
            with pytest.raises(InvalidInput):
                await store.query_rollouts(RolloutQuery(**fields))
        assert (await store.query_rollouts(RolloutQuery(limit=0))).rollouts == []
