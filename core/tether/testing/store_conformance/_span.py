"""The store conformance suite's tests of ``add_spans`` and ``get_spans`` (mixed into ``StoreConformance``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tether.store.base import Store
from tether.store.errors import InvalidInput, InvalidTransition, NotFound
from tether.testing.store_conformance._base import ConformanceBase, span
from tether.types import AttemptStatus, Span, SpanKind


class SpanConformance(ConformanceBase):
    """Spans: sequences, batches that are all or nothing, copies in and out."""

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
