"""A seeded run is reproducible: two ``fit`` runs of the same seeded command, their rollouts interleaving in a
different order each time, give the same metrics at every step and the same before/after table; and the
embedded backend samples a seeded request the same whatever else shares its batch."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.base import ChatRequest  # noqa: E402
from tether.models.embedded import EmbeddedBackend  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
GOOD = {"a", "b"}
#: figures of the machine, not of the run (how fast it went, how much memory it held): the only ones that may
#: differ between two runs of one seeded command
TIMINGS = ("rollouts_per_s", "rss_mb")
#: what the sampler's KV cache found: which call finds which earlier turn's KV depends on the order calls ran in
#: (their tokens do not: docs/reproducibility.md)
KV_FOUND = ("kv_hits", "kv_reused", "kv_reused_tokens")
#: the trainer's distance to the sampler's batched logprobs, whose last bits move with the batch's padding (unless
#: the backend's ``exact_logprobs``): equal to float rounding, not bit for bit; training does not read them
ROUNDING = ("drift_mean", "drift_max")


def pick_letter(task: str) -> str:
    """Two calls per rollout, after a pause of random length: rollouts finish, and their calls reach the
    sampler's batches, in a different order in every run."""
    time.sleep(random.uniform(0.0, 0.02))  # (the unseeded global generator: differs run to run)
    first = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    time.sleep(random.uniform(0.0, 0.02))
    again = client.chat.completions.create(
        model="toy", messages=[{"role": "user", "content": f"{task} Once more."}]
    )
    return (first.choices[0].message.content or "") + (again.choices[0].message.content or "")


def reward(task: str, output: str) -> float:
    return sum(letter in GOOD for letter in output.strip()) / 2


def _fit(checkpoint: Path, run_root: Path, seed: int) -> tether.FitResult:
    trainer = tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=tether.GRPO(group_size=4, tasks_per_step=4, lr=2e-3),
        n_runners=8,
        steps=3,
        eval_every=3,
        seed=seed,
        name="seeded",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 4},
    )
    tasks = [f"Pick a letter, round {i}." for i in range(12)]
    val = [f"Pick a letter, round {1000 + i}." for i in range(12)]
    return trainer.fit(tether.wrap(pick_letter, reward=reward), train=tasks, val=val)


def _figures(result: tether.FitResult) -> list[dict[str, Any]]:
    return [{k: v for k, v in h.items() if k not in TIMINGS + ROUNDING + KV_FOUND} for h in result.history]


def _drifts(result: tether.FitResult) -> list[float]:
    return [h[k] for h in result.history for k in ROUNDING if k in h]


def _table(result: tether.FitResult) -> str:
    return result.summary().split("\n\n")[0]  # (the lines after name the run folder)


def test_two_runs_of_a_seeded_fit_give_the_same_numbers(warm_start: Path, tmp_path: Path) -> None:
    first = _fit(warm_start, tmp_path / "one", seed=5)
    second = _fit(warm_start, tmp_path / "two", seed=5)
    train = [h for h in first.history if h["kind"] == "train"]
    assert len(train) == 3 and all(h["trained_transitions"] > 0 for h in train)  # (it did train)
    assert _figures(first) == _figures(second)
    assert _table(first) == _table(second)
    drifts = list(zip(_drifts(first), _drifts(second), strict=True))
    assert drifts and all(abs(a - b) < 1e-5 for a, b in drifts)
    other = _fit(warm_start, tmp_path / "three", seed=6)
    assert _figures(other) != _figures(first)  # the seed decides the samples: another seed, other numbers


@pytest.mark.parametrize("exact", [False, True])
async def test_a_seeded_request_samples_the_same_whatever_shares_its_batch(warm_start: Path, exact: bool) -> None:
    """The same tokens alone and in a crowd; the same logprobs to float rounding, and bit for bit with
    ``exact_logprobs``."""
    backend = EmbeddedBackend(str(warm_start))
    backend.exact_logprobs = exact
    try:
        request = ChatRequest(
            messages=[{"role": "user", "content": "Pick a letter, round 3."}], n=3, max_tokens=6, seed=11
        )

        def others(k: int) -> list[ChatRequest]:
            return [
                ChatRequest(messages=[{"role": "user", "content": "Pick " + "a letter " * (i + 1)}], max_tokens=9)
                for i in range(k)
            ]

        alone = await backend.chat(request)
        crowded = await asyncio.gather(*(backend.chat(r) for r in [*others(5), request, *others(3)]))
        together = crowded[5]
        assert backend.batches < 1 + 9  # (the crowd did share batches)
        for a, b in zip(alone.choices, together.choices, strict=True):
            assert a.response_token_ids == b.response_token_ids
            assert a.logprobs is not None and b.logprobs is not None
            if exact:
                assert a.logprobs == b.logprobs  # bit for bit
            else:
                assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
        assert len({tuple(c.response_token_ids or ()) for c in alone.choices}) > 1  # its n samples differ
    finally:
        await backend.close()
