"""The dashboard's rollout index on a real store: its counts and its pages agree (algorithm records are rows
of both), and the resources page's per-version figures come from one aggregate query."""

from __future__ import annotations

from tether import spans
from tether.dashboard.index import RolloutIndex
from tether.dashboard.rows import Filters, record_task
from tether.store.memory import MemoryStore
from tether.store.sqlite import SqliteStore
from tether.types import AttemptStatus, Mode, RolloutSpec


async def _fill(store: MemoryStore | SqliteStore) -> None:
    await store.enqueue([RolloutSpec(input=i, task_id=f"t{i % 4}", resources_version=i % 3) for i in range(120)])
    claimed = await store.dequeue("w", limit=120)
    for k, (_, attempt) in enumerate(claimed):
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=float(k % 2))
    record = RolloutSpec(
        input={"algorithm": "apo"},
        task_id=record_task("apo"),
        mode=Mode.VAL,
        metadata={spans.RECORD_METADATA: "apo"},
    )  # as Session.open_record makes one
    await store.enqueue([RolloutSpec(input="a", task_id="t0"), record, RolloutSpec(input="b", task_id="t1")])


async def test_counts_and_pages_agree_with_a_record_among_the_rows() -> None:
    store = MemoryStore(keep_rollouts=None)
    await _fill(store)
    index = RolloutIndex(store)
    try:
        first = await index.page(Filters(), 0, 50)
        assert len(first.rows) == 50
        assert first.counts is not None and first.total == first.counts["all"] == 123
        assert first.rows[1]["task_id"] == record_task("apo") and first.rows[1]["record"] == "apo"
        seen, offset = [], 0
        while True:
            page = await index.page(Filters(), offset, 50)
            seen += [r["rollout_id"] for r in page.rows]
            if page.next_offset is None:
                break
            assert len(page.rows) == 50
            offset = page.next_offset
        assert len(seen) == len(set(seen)) == 123
        queued = await index.page(Filters(status="queued"), 0, 50)
        assert queued.counts is not None and len(queued.rows) == queued.counts["queued"] == 3
    finally:
        await index.close()


async def test_version_usage_is_the_store_aggregate(tmp_path: object) -> None:
    store = SqliteStore(f"{tmp_path}/store.db")
    try:
        await _fill(store)
        usage = await RolloutIndex(store).version_usage()
        assert sorted(usage) == [0, 1, 2]
        assert [usage[v].rollouts for v in (0, 1, 2)] == [40, 40, 40]
        everything = await store.list_rollouts()
        for version, figures in usage.items():
            rewards = [r.reward for r in everything if r.resources_version == version and r.reward is not None]
            assert figures.mean_reward == sum(rewards) / len(rewards)
    finally:
        await store.close()
