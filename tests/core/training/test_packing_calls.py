"""``pack_calls`` (pure Python): consecutive calls of one rollout attempt on one policy are merged when, and
only when, the next prompt begins exactly with the previous prompt + response ids, within the context."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tether.training.signal.packing import PackedCall, PackedSequence, call_tokens, metrics, pack_calls
from tether.types import Transition


def _call(
    prompt: Sequence[int],
    response: Sequence[int],
    *,
    step: int,
    rollout: str = "r",
    attempt: str = "a",
    policy: str | None = "default",
) -> Transition:
    return Transition(
        rollout_id=rollout,
        attempt_id=attempt,
        task_id="t",
        agent_name="agent",
        step=step,
        messages=[],
        response={},
        prompt_token_ids=list(prompt),
        response_token_ids=list(response),
        logprobs=None,
        reward=0.0,
        trainable=True,
        advantage=1.0,
        policy=policy,
    )


def test_calls_that_extend_exactly_become_one_sequence() -> None:
    calls = [
        _call([1, 2], [3, 4], step=0),
        _call([1, 2, 3, 4, 5], [6], step=1),
        _call([1, 2, 3, 4, 5, 6], [7, 8], step=2),  # no new prompt tokens: still an exact extension
    ]
    (sequence,) = pack_calls(calls, 100)
    assert sequence == PackedSequence(
        (1, 2, 3, 4, 5, 6, 7, 8), (PackedCall(0, 2, 4), PackedCall(1, 5, 6), PackedCall(2, 6, 8))
    )
    figures = metrics([sequence], calls, 100, trained=5)
    assert figures == {
        "sequences": 1.0,
        "tokens_trained": 5.0,
        "tokens_shared": 0.0,
        "tokens_computed": 8.0,
        "tokens_saved": 18.0 - 8,
    }
    assert call_tokens(calls, 100) == 4 + 6 + 8


def test_steps_order_a_rollout_and_sequences_keep_the_batch_order() -> None:
    calls = [
        _call([9], [9], step=0, rollout="other"),
        _call([1, 2, 3], [4], step=1),
        _call([1], [2], step=0),
    ]
    packed = pack_calls(calls, 100)
    assert [[c.index for c in s.calls] for s in packed] == [[0], [2, 1]]


@pytest.mark.parametrize(
    "second",
    [
        _call([1, 2, 7, 5], [6], step=1),  # the reply re-rendered or edited: differs inside the prefix
        _call([1, 2, 3], [6], step=1),  # shorter than prompt + response
        _call([1, 2, 3, 4, 5], [6], step=1, rollout="r2"),  # another rollout
        _call([1, 2, 3, 4, 5], [6], step=1, attempt="a2"),  # another attempt of the rollout
        _call([1, 2, 3, 4, 5], [6], step=1, policy="checker"),  # another policy's weights
    ],
)
def test_anything_but_an_exact_extension_starts_a_new_sequence(second: Transition) -> None:
    packed = pack_calls([_call([1, 2], [3, 4], step=0), second], 100)
    assert [[c.index for c in s.calls] for s in packed] == [[0], [1]]
    assert packed[1].token_ids == (*second.prompt_token_ids, *second.response_token_ids)


def test_a_call_in_between_that_does_not_extend_breaks_the_chain() -> None:
    """writer, checker (its own conversation), writer: the second writer call is compared with the checker's,
    the call before it, so nothing merges; without the checker in the batch, the writer's calls merge."""
    writer = [_call([1, 2], [3], step=0), _call([1, 2, 3, 4], [5], step=2)]
    checker = _call([8, 9], [7], step=1)
    assert len(pack_calls([writer[0], checker, writer[1]], 100)) == 3
    assert len(pack_calls(writer, 100)) == 1


def test_a_sequence_never_outgrows_the_context() -> None:
    calls = [_call([1, 2], [3, 4], step=0), _call([1, 2, 3, 4, 5], [6], step=1)]
    assert len(pack_calls(calls, 6)) == 1
    packed = pack_calls(calls, 5)
    assert len(packed) == 2 and all(len(s.token_ids) <= 5 for s in packed)
    # a call longer than the context alone is cut as its row always was: the response to context - 1, the
    # prompt from the left
    (alone,) = pack_calls([_call([1, 2, 3, 4], [5, 6, 7], step=0)], 5)
    assert alone == PackedSequence((3, 4, 5, 6, 7), (PackedCall(0, 2, 5),))


def test_merge_false_gives_one_sequence_per_call() -> None:
    calls = [_call([1, 2], [3, 4], step=0), _call([1, 2, 3, 4, 5], [6], step=1)]
    assert [len(s.calls) for s in pack_calls(calls, 100, merge=False)] == [1, 1]


def test_a_call_without_prompt_ids_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="has no prompt token ids"):
        pack_calls([_call([], [3], step=0)], 100)
