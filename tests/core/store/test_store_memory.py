"""The memory store against the shared store conformance suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.store import Store, open_store
from tether.store.memory import MemoryStore
from tether.testing.store_conformance import StoreConformance
from tether.types import AttemptStatus, RolloutSpec, Span, SpanKind


class TestMemoryStore(StoreConformance):
    async def make_store(self, tmp_path: Path) -> Store:
        return open_store("memory:")

    async def test_open_store_gives_a_memory_store(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)


async def _finish(store: Store, n: int) -> list[str]:
    """Enqueue ``n`` rollouts, run each to success with a span, and return their ids."""
    ids = [r.rollout_id for r in await store.enqueue([RolloutSpec(input=i) for i in range(n)])]
    for rollout, attempt in await store.dequeue("w", limit=n):
        span = Span(rollout.rollout_id, attempt.attempt_id, kind=SpanKind.OTHER, name="s")
        await store.add_spans([span])
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)
    return ids


async def test_a_memory_store_keeps_the_latest_finished_rollouts() -> None:
    store = open_store("memory:?keep_rollouts=3")
    assert isinstance(store, MemoryStore) and store.keep_rollouts == 3
    first = await _finish(store, 2)
    latest = await _finish(store, 3)
    queued = [r.rollout_id for r in await store.enqueue([RolloutSpec(input="waits")])]
    kept = {r.rollout_id for r in await store.list_rollouts()}
    assert kept == set(latest) | set(queued), "the oldest finished ones went; the queued one stays"
    assert not set(first) & kept
    assert store._spans.keys() == {a.attempt_id for r in latest for a in await store.get_attempts(r)}
    assert open_store("memory:").keep_rollouts == 10_000  # type: ignore[attr-defined]
    assert open_store("memory:?keep_rollouts=all").keep_rollouts is None  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="keep_rollouts must be a whole number"):
        open_store("memory:?keep_rollouts=0")
    with pytest.raises(ValueError, match="unknown memory store setting 'keep'"):
        open_store("memory:?keep=3")
