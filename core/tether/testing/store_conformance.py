"""The store conformance suite: every backend must pass it, unchanged.

It checks each method of ``tether.store.base.Store`` against the contract written in that module's
docstrings: every state transition, every error, and that a method which raises changed nothing.

Using it for a backend
----------------------
Subclass ``StoreConformance`` in a test module whose class name starts with ``Test`` and implement
``make_store``; pytest (with pytest-asyncio) collects every inherited test::

    from tether.testing.store_conformance import StoreConformance

    class TestMyStore(StoreConformance):
        async def make_store(self, tmp_path):
            return MyStore(tmp_path / "db")

The ``store`` fixture calls ``make_store`` once per test (pytest makes a fresh instance of the class per
test, so ``make_store`` may keep per-test things such as a server on ``self``) and, after the test, awaits
``close_store(store)``, which by default awaits ``store.close()``. Override ``close_store`` to tear down
more (say, stop the server a client talks to), or override the ``store`` fixture itself for anything else.
Backend-specific tests go next to the inherited ones in the same class.

Timeouts and heartbeats are tested through ``requeue_stale(now=...)``; nothing sleeps waiting for a clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from tether.store.base import InvalidInput, InvalidTransition, NotFound, Store, StoreError
from tether.testing._import_conformance import ImportConformance
from tether.testing._query_conformance import QueryConformance
from tether.types import (
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    Attempt,
    AttemptStatus,
    LLMEndpoint,
    Mode,
    PromptTemplate,
    Rollout,
    RolloutSpec,
    RolloutStatus,
    Span,
    SpanKind,
)


def spec(i: int = 0, **kwargs: Any) -> RolloutSpec:
    """A small rollout spec; keyword arguments override its fields."""
    return RolloutSpec(input={"question": f"q{i}", "n": i}, **kwargs)


def span(rollout_id: str, attempt_id: str, name: str = "s", **kwargs: Any) -> Span:
    """A span of ``attempt_id`` with a little nested JSON payload."""
    kwargs.setdefault("kind", SpanKind.LLM)
    kwargs.setdefault("attributes", {"prompt_token_ids": [1, 2, 3], "nested": {"a": [1.5, None, "x"]}})
    return Span(rollout_id=rollout_id, attempt_id=attempt_id, name=name, **kwargs)


class StoreConformance(ImportConformance, QueryConformance):
    """Inherit from this in a ``Test...`` class and implement ``make_store``. See the module docstring."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    async def make_store(self, tmp_path: Path) -> Store:
        raise NotImplementedError("subclasses of StoreConformance implement make_store(tmp_path) -> Store")

    async def close_store(self, store: Store) -> None:
        await store.close()

    @pytest_asyncio.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        made = await self.make_store(tmp_path)
        try:
            yield made
        finally:
            await self.close_store(made)

    # -- helpers ------------------------------------------------------------------------------------------

    async def _running(self, store: Store, **kwargs: Any) -> tuple[Rollout, Attempt]:
        (queued,) = await store.enqueue([spec(**kwargs)])
        claimed = await store.dequeue("w1")
        assert len(claimed) == 1 and claimed[0][0].rollout_id == queued.rollout_id
        return claimed[0]

    async def _snapshot(self, store: Store) -> list[dict[str, Any]]:
        """Everything observable about every rollout: to check that a failed call changed nothing."""
        out = []
        for rollout in await store.list_rollouts():
            attempts = await store.get_attempts(rollout.rollout_id)
            spans = [[s.to_dict() for s in await store.get_spans(a.attempt_id)] for a in attempts]
            out.append({"rollout": rollout.to_dict(), "attempts": [a.to_dict() for a in attempts], "spans": spans})
        return out

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

    # -- spans --------------------------------------------------------------------------------------------

    async def test_add_spans_assigns_sequences_per_attempt(self, store: Store) -> None:
        r1, a1 = await self._running(store)
        r2, a2 = await self._running(store)
        batch = [
            span(r1.rollout_id, a1.attempt_id, "a", sequence=99),
            span(r2.rollout_id, a2.attempt_id, "b"),
            span(r1.rollout_id, a1.attempt_id, "c", kind=SpanKind.TOOL, agent_name="planner", parent_id="p"),
        ]
        assert await store.add_spans(batch) == [0, 0, 1]
        assert await store.add_spans([span(r1.rollout_id, a1.attempt_id, "d", kind="reward")]) == [2]
        assert await store.add_spans([]) == []
        got = await store.get_spans(a1.attempt_id)
        assert [(s.name, s.sequence) for s in got] == [("a", 0), ("c", 1), ("d", 2)]
        assert [s.kind for s in got] == [SpanKind.LLM, SpanKind.TOOL, SpanKind.REWARD]
        for sent, stored in zip([batch[0], batch[2]], got[:2], strict=True):
            assert (stored.span_id, stored.parent_id, stored.agent_name) == (
                sent.span_id,
                sent.parent_id,
                sent.agent_name,
            )
            assert (stored.start_time, stored.end_time, stored.attributes) == (
                sent.start_time,
                sent.end_time,
                sent.attributes,
            )
            assert stored.rollout_id == r1.rollout_id and stored.attempt_id == a1.attempt_id
        assert [s.name for s in await store.get_spans(a2.attempt_id)] == ["b"]
        assert [s.name for s in await store.get_spans(a1.attempt_id, since=1)] == ["c", "d"]
        assert await store.get_spans(a1.attempt_id, since=3) == []
        with pytest.raises(NotFound):
            await store.get_spans("at-missing")

    async def test_big_batch_in_order(self, store: Store) -> None:
        rollout, attempt = await self._running(store)
        spans = [span(rollout.rollout_id, attempt.attempt_id, f"s{i}", attributes={"i": i}) for i in range(500)]
        assert await store.add_spans(spans[:250]) == list(range(250))
        assert await store.add_spans(spans[250:]) == list(range(250, 500))
        got = await store.get_spans(attempt.attempt_id, since=100)
        assert [s.attributes["i"] for s in got] == list(range(100, 500))
        assert [s.sequence for s in got] == list(range(100, 500))

    async def test_spans_after_the_attempt_ended_are_kept(self, store: Store) -> None:
        rollout, attempt = await self._running(store)
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, reward=1.0)
        assert await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "late")]) == [0]
        assert [s.name for s in await store.get_spans(attempt.attempt_id)] == ["late"]

    async def test_spans_of_a_timed_out_attempt_are_refused(self, store: Store) -> None:
        """A worker presumed dead (its attempt timed out) that comes back must not add to the rollout's record:
        the rollout has moved on (requeued to another worker, or failed)."""
        rollout, dead = await self._running(store, max_attempts=2, heartbeat_timeout_s=10)
        other, alive = await self._running(store)
        await store.add_spans([span(rollout.rollout_id, dead.attempt_id, "before")])
        (beat,) = await store.get_attempts(rollout.rollout_id)
        assert await store.requeue_stale(now=beat.last_heartbeat_at + 11) == [rollout.rollout_id]
        before = await self._snapshot(store)
        for batch in (
            [span(rollout.rollout_id, dead.attempt_id, "late")],
            [span(other.rollout_id, alive.attempt_id, "fine"), span(rollout.rollout_id, dead.attempt_id, "late")],
        ):
            with pytest.raises(InvalidTransition, match="timed out"):
                await store.add_spans(batch)
        assert await self._snapshot(store) == before
        assert await store.add_spans([span(other.rollout_id, alive.attempt_id, "fine")]) == [0]

    async def test_spans_are_copied_in_and_out(self, store: Store) -> None:
        rollout, attempt = await self._running(store)

        def attributes() -> dict[str, Any]:
            return {
                "prompt_token_ids": list(range(100, 164)),
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
                "nested": {"a": [1.5, None, "x", True], "b": {"c": [[1, 2], []]}},
                "empty": {},
            }

        given = attributes()
        await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "s", attributes=given)])
        given["prompt_token_ids"].append(1)  # the writer changes its objects after the call
        given["messages"][0]["content"] = "changed"
        given["nested"]["b"]["c"][0].append(3)
        given["empty"]["x"] = 1
        (got,) = await store.get_spans(attempt.attempt_id)
        assert got.attributes == attributes()
        got.attributes["prompt_token_ids"][0] = -1  # so does a reader
        got.attributes["messages"].append({"role": "tool"})
        got.attributes["nested"]["a"].clear()
        got.attributes["nested"]["b"]["c"][1].append(0)
        got.name = "renamed"
        (again,) = await store.get_spans(attempt.attempt_id)
        assert again.attributes == attributes() and again.name == "s"
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED)
        (harvested,) = await store.harvest([rollout.rollout_id])
        assert [s.attributes for s in harvested.spans] == [attributes()]

    async def test_span_attributes_come_back_as_json_gives_them(self, store: Store) -> None:
        rollout, attempt = await self._running(store)
        given = {"pair": (1, "a"), 7: "int key", "nan": math.nan, "deep": [(1.0, 2), {"k": (None,)}], "big": 2**62}
        await store.add_spans([span(rollout.rollout_id, attempt.attempt_id, "s", attributes=given)])
        (got,) = await store.get_spans(attempt.attempt_id)
        assert got.attributes == {
            "pair": [1, "a"],
            "7": "int key",
            "nan": None,
            "deep": [[1.0, 2], {"k": [None]}],
            "big": 2**62,
        }
        assert type(got.attributes["pair"]) is list and type(got.attributes["deep"][0]) is list

    @pytest.mark.parametrize(
        "bad", ["unknown_attempt", "wrong_rollout", "bad_kind", "non_json", "not_dict", "no_name"]
    )
    async def test_bad_span_batch_is_all_or_nothing(self, store: Store, bad: str) -> None:
        r1, a1 = await self._running(store)
        r2, a2 = await self._running(store)
        await store.add_spans([span(r1.rollout_id, a1.attempt_id, "first")])
        before = await self._snapshot(store)
        wrong: Span = {
            "unknown_attempt": lambda: span(r1.rollout_id, "at-missing"),
            "wrong_rollout": lambda: span(r2.rollout_id, a1.attempt_id),
            "bad_kind": lambda: span(r1.rollout_id, a1.attempt_id, kind="thought"),
            "non_json": lambda: span(r1.rollout_id, a1.attempt_id, attributes={"x": object()}),
            "not_dict": lambda: span(r1.rollout_id, a1.attempt_id, attributes=[1, 2]),
            "no_name": lambda: span(r1.rollout_id, a1.attempt_id, name=""),
        }[bad]()
        batch = [span(r1.rollout_id, a1.attempt_id, "ok"), span(r2.rollout_id, a2.attempt_id, "ok2"), wrong]
        with pytest.raises(InvalidInput):
            await store.add_spans(batch)
        assert await self._snapshot(store) == before
        assert await store.add_spans([span(r1.rollout_id, a1.attempt_id, "next")]) == [1]

    async def test_add_spans_rejects_non_spans(self, store: Store) -> None:
        with pytest.raises(InvalidInput):
            await store.add_spans([{"name": "x"}])  # type: ignore[list-item]  # deliberately wrong

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
