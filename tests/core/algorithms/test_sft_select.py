"""tether.SFT's selection (``tether.algorithms.sft_data``): which rollouts and calls train, and the errors when
the filter names an unknown sub-agent or keeps nothing. No torch: selection runs before any model."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tether import spans
from tether.algorithms.sft_data import Filter, read_finished, select
from tether.store.memory import MemoryStore
from tether.types import AttemptStatus, Rollout, RolloutSpec, RolloutStatus, Span, SpanKind


def _call(rollout_id: str, agent: str | None, question: str, answer: str, **extra: Any) -> Span:
    attributes: dict[str, Any] = {
        "request": {"messages": [{"role": "user", "content": question}], "tools": None},
        "prompt_token_ids": None,
        "choices": [{"message": {"role": "assistant", "content": answer}, "response_token_ids": None}],
        spans.IMPORTED: True,
        **extra,
    }
    return Span(rollout_id, "a-" + rollout_id, SpanKind.LLM, spans.LLM_CALL, agent, attributes)


def _rollout(
    rollout_id: str,
    reward: float | None,
    calls: list[tuple[str | None, str]],
    *,
    status: RolloutStatus = RolloutStatus.SUCCEEDED,
    metadata: dict[str, Any] | None = None,
) -> tuple[Rollout, list[Span]]:
    rollout = Rollout(
        rollout_id=rollout_id, input="q", task_id="t", status=status, reward=reward, metadata=metadata or {}
    )
    found = []
    for i, (agent, answer) in enumerate(calls):
        span = _call(rollout_id, agent, f"q{i}", answer)
        span.sequence = i
        found.append(span)
    return rollout, found


STORE = [
    _rollout("good", 1.0, [("planner", "plan A"), ("writer", "text A")]),
    _rollout("bad", 0.0, [("planner", "plan B"), ("writer", "text B")]),
    _rollout("unrated", None, [("writer", "text C")], metadata={"thumbs": 1}),
    _rollout("failed", 1.0, [("writer", "text D")], status=RolloutStatus.FAILED),
    _rollout("record", 1.0, [("writer", "text E")], metadata={spans.RECORD_METADATA: "GRPO"}),
]


def _answers(rule: Filter) -> list[str]:
    return [e.reply["content"] for e in select(STORE, rule).examples]


def test_without_a_filter_every_call_of_the_succeeded_rollouts_trains() -> None:
    selection = select(STORE, Filter())
    assert [e.reply["content"] for e in selection.examples] == ["plan A", "text A", "plan B", "text B", "text C"]
    assert selection.rollouts_seen == 5 and selection.rollouts_kept == 3
    assert selection.agent_names == {"planner", "writer"}
    first = selection.examples[0]
    assert first.messages == [{"role": "user", "content": "q0"}] and first.imported
    assert first.prompt_token_ids == [] and first.response_token_ids == []  # to be tokenized by the model


def test_min_reward_keeps_rollouts_at_or_above_it_and_drops_unrewarded_ones() -> None:
    assert _answers(Filter(min_reward=1.0)) == ["plan A", "text A"]
    assert _answers(Filter(min_reward=0.0)) == ["plan A", "text A", "plan B", "text B"]


def test_feedback_reads_the_rollouts_metadata_or_a_span_attribute() -> None:
    assert _answers(Filter(feedback={"thumbs": 1})) == ["text C"]
    rollout, found = _rollout("rated", None, [("writer", "text F")])
    found[0].attributes["user.rating"] = 4
    items = [*STORE, (rollout, found)]
    assert [e.reply["content"] for e in select(items, Filter(feedback={"user.rating": 3})).examples] == ["text F"]
    with pytest.raises(ValueError, match="selected no LLM call"):
        select(items, Filter(feedback={"user.rating": 5}))


def test_agents_select_the_calls_of_those_sub_agents() -> None:
    assert _answers(Filter(agents=frozenset({"writer"}))) == ["text A", "text B", "text C"]
    assert _answers(Filter(min_reward=1.0, agents=frozenset({"planner"}))) == ["plan A"]


def test_an_unknown_agent_name_is_an_error_listing_the_captured_names() -> None:
    with pytest.raises(ValueError) as caught:
        select(STORE, Filter(agents=frozenset({"writer", "critic"})))
    message = str(caught.value)
    assert "unknown sub-agent 'critic'" in message and "planner, writer" in message


def test_nothing_selected_says_what_each_test_let_through() -> None:
    with pytest.raises(ValueError) as caught:
        select(STORE, Filter(min_reward=2.0))
    message = str(caught.value)
    assert "5 rollouts in the store, 3 succeeded, 0 passed min_reward=2.0" in message


def _finished_in(order: list[RolloutSpec]) -> list[tuple[Any, Any]]:
    """``read_finished`` of a store where the rollouts of ``order`` were enqueued and finished in that order."""

    async def go() -> list[tuple[Any, Any]]:
        store = MemoryStore()
        await store.enqueue(order)
        while claimed := await store.dequeue("w"):
            for rollout, attempt in claimed:
                await store.finish_attempt(attempt.attempt_id, AttemptStatus.SUCCEEDED, output=rollout.input)
        items = await read_finished(store)
        return [(r.input, r.metadata.get(spans.SEED_METADATA)) for r, _ in items]

    return asyncio.run(go())


def test_finished_rollouts_are_read_in_an_order_of_their_own_not_the_stores() -> None:
    """Concurrent runners finish (and a retry requeues) rollouts in any order: what SFT shuffles with its seed
    and what WarmStart fits the tokenizer to must not depend on it (issue 23)."""
    seeded = [RolloutSpec(input=f"task {i % 3}", metadata={spans.SEED_METADATA: (7 * i) % 5}) for i in range(5)]
    unseeded = [RolloutSpec(input=f"imported {i}") for i in range(3)]  # imported traces: the store's order
    first = _finished_in(seeded + unseeded)
    assert first == _finished_in(seeded[::-1] + unseeded)
    assert [seed for _, seed in first[:5]] == [0, 1, 2, 3, 4]
    assert [task for task, _ in first[5:]] == ["imported 0", "imported 1", "imported 2"]
