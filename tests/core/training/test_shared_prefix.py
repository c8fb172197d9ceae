"""The rule for a micro-batch's shared prompt prefix (``tether.training.signal.prefix``): the rows' common token
ids, stopping before the first position whose output trains, only when long enough and there are two rows."""

from __future__ import annotations

from tether.training.signal.packing import PackedCall, PackedSequence
from tether.training.signal.prefix import MIN_SHARED, shared_prefix, shared_tokens

SYSTEM = tuple(range(100, 100 + 2 * MIN_SHARED))  # a system prompt's ids, longer than the minimum


def row(prompt: tuple[int, ...], response: tuple[int, ...] = (7, 8, 9)) -> PackedSequence:
    ids = prompt + response
    return PackedSequence(ids, (PackedCall(0, len(prompt), len(ids)),))


def test_rows_share_their_common_ids() -> None:
    a, b = row((*SYSTEM, 1, 2, 3)), row((*SYSTEM, 1, 5))
    assert shared_prefix([a, b]) == len(SYSTEM) + 1
    assert shared_tokens([[a, b], [a]]) == len(SYSTEM) + 1  # (a micro-batch of one row shares nothing)


def test_the_prefix_stops_before_the_first_trained_position() -> None:
    same = (*SYSTEM, 1, 2)
    a, b = row(same, (7, 8)), row(same, (7, 9))  # identical prompts, and even the first response token
    # the position predicting the first response token (len(same) - 1) must be computed in the rows' own pass
    assert shared_prefix([a, b]) == len(same) - 1
    later = PackedSequence((*same, 7, 8), (PackedCall(1, len(same) + 1, len(same) + 2),))
    assert shared_prefix([a, later]) == len(same) - 1  # the earliest trained position of any row bounds it


def test_short_prefixes_and_single_rows_share_nothing() -> None:
    short = tuple(range(MIN_SHARED - 1))
    assert shared_prefix([row((*short, 1)), row((*short, 2))]) == 0
    assert shared_prefix([row((*SYSTEM, 1))]) == 0
    assert shared_prefix([row((1, *SYSTEM)), row((2, *SYSTEM))]) == 0  # common ids must start the rows
