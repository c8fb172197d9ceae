"""The store conformance suite's tests of an attempt's life after it is claimed: ``finish_attempt`` and retries,
``heartbeat`` and ``requeue_stale``, and ``cancel_rollout`` (mixed into ``StoreConformance``)."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from tether.store.base import Store
from tether.store.errors import InvalidInput, InvalidTransition, NotFound, StoreError
from tether.testing.store_conformance._base import ConformanceBase, span, spec
from tether.types import DEFAULT_HEARTBEAT_TIMEOUT_S, AttemptStatus, RolloutStatus


class LifecycleConformance(ConformanceBase):
    """Finishing, retrying, timing out and cancelling attempts."""

    # -- finish_attempt and retries -----------------------------------------------------------------------

    async def test_finish_succeeded(self, store: Store) -> None:
        rollout, attempt = await self._running(store)
        out = await store.finish_attempt(
            attempt.attempt_id, AttemptStatus.SUCCEEDED, output={"answer": [4]}, reward=0.5
        )
        assert out.status == RolloutStatus.SUCCEEDED and out.finished_at is not None
        assert (out.output, out.reward, out.error) == ({"answer": [4]}, 0.5, None)
        assert await store.get_rollout(rollout.rollout_id) == out
        (a,) = await store.get_attempts(rollout.rollout_id)
        assert a.status == AttemptStatus.SUCCEEDED and a.finished_at is not None
        assert await store.dequeue("w2") == []

    async def test_failed_attempts_retry_up_to_max_attempts(self, store: Store) -> None:
        rollout, attempt = await self._running(store, max_attempts=3)
        for index in (1, 2):
            out = await store.finish_attempt(attempt.attempt_id, AttemptStatus.FAILED, error=f"boom {index}")
            assert out.status == RolloutStatus.QUEUED and out.attempt_count == index
            assert out.finished_at is None
            ((again, attempt),) = await store.dequeue(f"w{index}")
            assert again.rollout_id == rollout.rollout_id and attempt.index == index + 1
        out = await store.finish_attempt(attempt.attempt_id, "failed", error="boom 3")  # type: ignore[arg-type]
        assert out.status == RolloutStatus.FAILED and out.error == "boom 3" and out.attempt_count == 3
        assert out.finished_at is not None
        attempts = await store.get_attempts(rollout.rollout_id)
        assert [a.index for a in attempts] == [1, 2, 3]
        assert [a.error for a in attempts] == ["boom 1", "boom 2", "boom 3"]
        assert {a.status for a in attempts} == {AttemptStatus.FAILED}
        assert await store.dequeue("w9") == []

    async def test_retry_then_succeed(self, store: Store) -> None:
        _, attempt = await self._running(store, max_attempts=2)
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.FAILED, error="flaky")
        ((_, attempt),) = await store.dequeue("w2")
        out = await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1)
        assert out.status == RolloutStatus.SUCCEEDED and out.reward == 1.0 and out.error is None

    async def test_finish_errors(self, store: Store) -> None:
        _, attempt = await self._running(store, max_attempts=2)
        with pytest.raises(NotFound):
            await store.finish_attempt("at-missing", AttemptStatus.SUCCEEDED)
        for status in (AttemptStatus.TIMEOUT, AttemptStatus.CANCELLED, AttemptStatus.RUNNING):
            with pytest.raises(InvalidTransition):
                await store.finish_attempt(attempt.attempt_id, status)
        with pytest.raises(StoreError):
            await store.finish_attempt(attempt.attempt_id, "bogus")  # type: ignore[arg-type]
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.FAILED)
        before = await self._snapshot(store)
        for status in (AttemptStatus.SUCCEEDED, AttemptStatus.FAILED):
            with pytest.raises(InvalidTransition):
                await store.finish_attempt(attempt.attempt_id, status)
        assert await self._snapshot(store) == before

    @pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf, "1.0", True])
    async def test_bad_reward_changes_nothing(self, store: Store, reward: Any) -> None:
        _, attempt = await self._running(store)
        before = await self._snapshot(store)
        with pytest.raises(InvalidInput):
            await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=reward)
        assert await self._snapshot(store) == before
        out = await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=0.25)
        assert out.reward == 0.25

    async def test_non_json_output_changes_nothing(self, store: Store) -> None:
        _, attempt = await self._running(store)
        before = await self._snapshot(store)
        with pytest.raises(InvalidInput):
            await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, output=object())
        assert await self._snapshot(store) == before

    # -- heartbeat and requeue_stale ----------------------------------------------------------------------

    async def test_requeue_on_timeout(self, store: Store) -> None:
        rollout, attempt = await self._running(store, max_attempts=2, timeout_s=30)
        assert await store.requeue_stale(now=attempt.started_at + 29) == []
        assert await store.requeue_stale(now=attempt.started_at + 31) == [rollout.rollout_id]
        again = await store.get_rollout(rollout.rollout_id)
        assert again.status == RolloutStatus.QUEUED and again.attempt_count == 1
        (a,) = await store.get_attempts(rollout.rollout_id)
        assert a.status == AttemptStatus.TIMEOUT and a.error and a.finished_at is not None
        with pytest.raises(InvalidTransition):
            await store.finish_attempt(a.attempt_id, AttemptStatus.SUCCEEDED)
        ((_, second),) = await store.dequeue("w2")
        assert second.index == 2
        assert await store.requeue_stale(now=second.started_at + 31) == [rollout.rollout_id]
        final = await store.get_rollout(rollout.rollout_id)
        assert final.status == RolloutStatus.FAILED and final.error and final.finished_at is not None
        assert await store.requeue_stale(now=second.started_at + 1000) == []

    async def test_requeue_on_missing_heartbeat(self, store: Store) -> None:
        rollout, attempt = await self._running(store, max_attempts=2, heartbeat_timeout_s=10)
        assert await store.requeue_stale(now=attempt.last_heartbeat_at + 9) == []
        assert await store.requeue_stale(now=attempt.last_heartbeat_at + 11) == [rollout.rollout_id]
        assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.QUEUED
        (a,) = await store.get_attempts(rollout.rollout_id)
        assert a.status == AttemptStatus.TIMEOUT

    async def test_span_arrival_is_a_heartbeat(self, store: Store) -> None:
        rollout, attempt = await self._running(store, heartbeat_timeout_s=10)
        await asyncio.sleep(0.05)  # let the clock move past the attempt's start
        await store.add_spans([span(rollout.rollout_id, attempt.attempt_id)])
        (a,) = await store.get_attempts(rollout.rollout_id)
        assert a.last_heartbeat_at > attempt.last_heartbeat_at
        # stale when measured from the start, alive when measured from the span
        assert await store.requeue_stale(now=a.last_heartbeat_at + 9.99) == []
        assert await store.requeue_stale(now=a.last_heartbeat_at + 10.5) == [rollout.rollout_id]

    async def test_explicit_heartbeat(self, store: Store) -> None:
        rollout, attempt = await self._running(store, heartbeat_timeout_s=10)
        await asyncio.sleep(0.05)
        await store.heartbeat(attempt.attempt_id)
        (a,) = await store.get_attempts(rollout.rollout_id)
        assert a.last_heartbeat_at > attempt.last_heartbeat_at
        assert await store.requeue_stale(now=a.last_heartbeat_at + 9.99) == []
        with pytest.raises(NotFound):
            await store.heartbeat("at-missing")
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED)
        with pytest.raises(InvalidTransition):
            await store.heartbeat(attempt.attempt_id)

    async def test_a_dead_workers_rollout_is_swept_by_default(self, store: Store) -> None:
        rollout, attempt = await self._running(store)  # a spec with default settings
        assert rollout.heartbeat_timeout_s == DEFAULT_HEARTBEAT_TIMEOUT_S
        assert await store.requeue_stale(now=attempt.last_heartbeat_at + DEFAULT_HEARTBEAT_TIMEOUT_S - 1) == []
        assert await store.requeue_stale(now=time.time() + 10 * 365 * 86400) == [rollout.rollout_id]
        final = await store.get_rollout(rollout.rollout_id)
        assert final.status == RolloutStatus.FAILED and "no heartbeat" in (final.error or "")

    async def test_requeue_ignores_rollouts_without_limits(self, store: Store) -> None:
        await self._running(store, heartbeat_timeout_s=None)  # limits turned off explicitly
        await store.enqueue([spec(1, timeout_s=1)])  # queued, not running: nothing to time out
        assert await store.requeue_stale(now=time.time() + 1e6) == []

    # -- cancel -------------------------------------------------------------------------------------------

    async def test_cancel_queued_and_running(self, store: Store) -> None:
        rollout, attempt = await self._running(store)
        (queued,) = await store.enqueue([spec(1)])
        out = await store.cancel_rollout(queued.rollout_id)
        assert out.status == RolloutStatus.CANCELLED and out.finished_at is not None
        assert await store.dequeue("w") == []
        out = await store.cancel_rollout(rollout.rollout_id)
        assert out.status == RolloutStatus.CANCELLED
        (a,) = await store.get_attempts(rollout.rollout_id)
        assert a.status == AttemptStatus.CANCELLED and a.finished_at is not None
        with pytest.raises(InvalidTransition):
            await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED)
        before = await self._snapshot(store)
        with pytest.raises(InvalidTransition):
            await store.cancel_rollout(rollout.rollout_id)
        with pytest.raises(NotFound):
            await store.cancel_rollout("ro-missing")
        assert await self._snapshot(store) == before

    async def test_cancel_finished_is_refused(self, store: Store) -> None:
        rollout, attempt = await self._running(store)
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)
        with pytest.raises(InvalidTransition):
            await store.cancel_rollout(rollout.rollout_id)
        assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.SUCCEEDED
