"""What every part of the store conformance suite shares: the spec and span builders and the helpers that claim
a rollout and snapshot a store."""

from __future__ import annotations

from typing import Any

from tether.store.base import Store
from tether.types import (
    Attempt,
    Rollout,
    RolloutSpec,
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


class ConformanceBase:
    """Helpers for the conformance mixins; each test gets its store from the ``store`` fixture."""

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
