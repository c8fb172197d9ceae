"""A seeded row samples the same tokens whatever shares its batch: where its draw lands on the edge between two
tokens (where the batched pass's last bits, which move with the batch's padding, would decide it), and whatever
top-p or greedy rows share the batch. See docs/reproducibility.md."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tether.models.embedded.model import EmbeddedModel, create_embedded, turn_token_ids  # noqa: E402
from tether.models.local._sampling import Sample, SampleParams, generate  # noqa: E402

WORDS = "add the numbers then divide by two and call the calculator on it".split()


@pytest.fixture(scope="module")
def fresh() -> EmbeddedModel:
    """A fresh nano model: nearly uniform over its vocabulary, so many tokens' edges lie close together."""
    torch.set_num_threads(1)
    return create_embedded(preset="nano", seed=0)


def _prompts(model: EmbeddedModel, count: int) -> list[list[int]]:
    rng = random.Random(0)
    return [model.tokenizer.encode(" ".join(rng.choices(WORDS, k=rng.randint(3, 40)))) for _ in range(count)]


def _sample(model: EmbeddedModel, prompts: Sequence[Any], params: Sequence[SampleParams]) -> list[Sample]:
    with torch.inference_mode():
        return generate(
            model.model, model.tokenizer, prompts, params, stop_token_ids=turn_token_ids(model.tokenizer)
        )


def test_a_draw_on_an_edge_gives_the_same_token_alone_and_in_a_batch(fresh: EmbeddedModel) -> None:
    # rows 398 and 851 of these 1,000 seeded rows draw, at some token, within 1e-7 of an edge: before the fix
    # each sampled another token in its batch of 64 than alone (found by sampling all 1,000 both ways)
    prompts = _prompts(fresh, 1000)
    params = [SampleParams(32, temperature=1.0, seed=1000 + i) for i in range(1000)]
    for row, start in ((398, 384), (851, 832)):
        batch = _sample(fresh, prompts[start : start + 64], params[start : start + 64])
        (alone,) = _sample(fresh, [prompts[row]], [params[row]])
        assert batch[row - start].token_ids == alone.token_ids, f"row {row} sampled other tokens in its batch"


def test_top_p_and_greedy_neighbours_leave_a_row_alone(fresh: EmbeddedModel) -> None:
    # before the fix, one row with top_p < 1 in a batch laid every row's tokens out by probability, not by id
    prompts = _prompts(fresh, 24)
    plain = [SampleParams(16, temperature=1.0, seed=100 + i) for i in range(8)]
    others = [SampleParams(16, temperature=0.0, seed=200 + i) for i in range(8)]
    others += [SampleParams(16, temperature=1.0, top_p=0.9, seed=300 + i) for i in range(8)]
    alone = _sample(fresh, prompts[:8], plain)
    mixed = _sample(fresh, prompts, plain + others)
    assert [s.token_ids for s in mixed[:8]] == [s.token_ids for s in alone]
    for i, params in enumerate(others, start=8):  # and each of the others is the same alone
        (one,) = _sample(fresh, [prompts[i]], [params])
        assert mixed[i].token_ids == one.token_ids
