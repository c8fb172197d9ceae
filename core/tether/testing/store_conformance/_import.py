"""The store conformance suite's tests of ``Store.import_rollout`` (mixed into ``StoreConformance``)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.store.base import ImportedRollout, Store, import_id
from tether.store.errors import InvalidInput
from tether.testing.store_conformance._base import ConformanceBase
from tether.types import AttemptStatus, Mode, RolloutSpec, RolloutStatus, Span, SpanKind


def _span(span_id: str, name: str = "call", **kwargs: Any) -> Span:
    kwargs.setdefault("attributes", {"request": {"messages": [{"role": "user", "content": name}]}})
    return Span("", "", kwargs.pop("kind", SpanKind.LLM), name, span_id=span_id, start_time=1.0, **kwargs)


class ImportConformance(ConformanceBase):
    """Imports bypass the queue, are atomic, and are idempotent by key and span id."""

    async def test_import_writes_a_finished_rollout_and_leaves_the_queue_alone(self, store: Store) -> None:
        queued = await store.enqueue([RolloutSpec(input=i) for i in range(3)])
        ((running, attempt),) = await store.dequeue("trainer")
        before = await self._snapshot(store)
        item = ImportedRollout(
            key="t1", input="hi", output="bye", mode=Mode.VAL, metadata={"source": "otlp"},
            spans=[_span("a"), _span("b", parent_id="a", kind=SpanKind.TOOL)],
        )  # fmt: skip
        result = await store.import_rollout(item)
        assert (result.rollout_id, result.attempt_id) == import_id("t1")
        assert result.created and result.added == 2
        rollout = await store.get_rollout(result.rollout_id)
        assert rollout.status == RolloutStatus.SUCCEEDED and rollout.finished_at is not None
        assert (rollout.input, rollout.output, rollout.mode, rollout.metadata) == (
            "hi",
            "bye",
            Mode.VAL,
            item.metadata,
        )
        (imported,) = await store.get_attempts(result.rollout_id)
        assert imported.status == AttemptStatus.SUCCEEDED and imported.worker_id == "tether-import"
        spans = await store.get_spans(imported.attempt_id)
        assert [(s.span_id, s.parent_id, s.sequence, s.rollout_id) for s in spans] == [
            ("a", None, 0, result.rollout_id),
            ("b", "a", 1, result.rollout_id),
        ]
        # nothing else moved: the queue hands out only its own rollouts, the running one is untouched
        assert [
            r for r in await self._snapshot(store) if r["rollout"]["rollout_id"] != result.rollout_id
        ] == before
        claimed = await store.dequeue("trainer", limit=10)
        assert [r.rollout_id for r, _ in claimed] == [r.rollout_id for r in queued[1:]]
        assert (await store.get_rollout(running.rollout_id)).status == RolloutStatus.RUNNING
        await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED)

    async def test_importing_a_key_again_adds_only_new_spans(self, store: Store) -> None:
        first = await store.import_rollout(ImportedRollout(key="t2", spans=[_span("a"), _span("a"), _span("b")]))
        assert first.added == 2  # a duplicate id within one import counts once
        again = await store.import_rollout(ImportedRollout(key="t2", spans=[_span("a"), _span("b")]))
        assert not again.created and again.added == 0 and again.rollout_id == first.rollout_id
        later = await store.import_rollout(
            ImportedRollout(
                key="t2", input="late input", output="done", error="boom", spans=[_span("c"), _span("a")]
            )
        )
        assert later.added == 1
        (rollout,) = await store.list_rollouts()
        assert (rollout.status, rollout.error, rollout.input, rollout.output) == (
            RolloutStatus.FAILED, "boom", "late input", "done",
        )  # fmt: skip
        (attempt,) = await store.get_attempts(rollout.rollout_id)
        assert attempt.status == AttemptStatus.FAILED
        spans = await store.get_spans(attempt.attempt_id)
        assert [(s.span_id, s.sequence) for s in spans] == [("a", 0), ("b", 1), ("c", 2)]
        await store.import_rollout(ImportedRollout(key="t2", input="ignored", spans=[]))
        assert (await store.get_rollout(rollout.rollout_id)).input == "late input"
        (harvested,) = await store.harvest()
        assert len(harvested.spans) == 3

    @pytest.mark.parametrize("bad", ["key", "slash", "kind", "attributes", "input", "mode", "time"])
    async def test_a_bad_import_writes_nothing(self, store: Store, bad: str) -> None:
        await store.import_rollout(ImportedRollout(key="ok", spans=[_span("x")]))
        before = await self._snapshot(store)
        item = ImportedRollout(key="ok", output="changed", spans=[_span("y")])
        if bad == "key":
            item.key = ""
        elif bad == "slash":
            item.key = "a/b"
        elif bad == "kind":
            item.spans.append(Span("", "", "nope", "s", span_id="z"))  # type: ignore[arg-type]
        elif bad == "attributes":
            item.spans.append(_span("z", attributes={"x": object()}))
        elif bad == "input":
            item.input = {1, 2}
        elif bad == "mode":
            item.mode = "sometimes"  # type: ignore[assignment]
        else:
            item.spans.append(_span("z", end_time=float("nan")))
        with pytest.raises(InvalidInput):
            await store.import_rollout(item)
        assert await self._snapshot(store) == before
