"""A rollout's KV cache across its turns (``tether.models.local._kv_cache``): a call whose prompt extends an
earlier
call's prompt and reply starts from that call's KV, samples the same tokens as without it, and the cache keeps
to its byte budget, least recently used out first, one weights version at a time."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.models.embedded import EmbeddedBackend, EmbeddedModel  # noqa: E402
from tether.models.embedded.model import turn_token_ids  # noqa: E402
from tether.models.local._kv_cache import MIN_REUSE, PrefixKV, parse_budget  # noqa: E402
from tether.models.local._sampling import SampleParams, generate  # noqa: E402

WORDS = "add the numbers then divide by two and call the calculator on it".split()


def _sample(model: EmbeddedModel, prompts: list[list[int]], seeds: list[int], cache: PrefixKV | None) -> Any:
    params = [SampleParams(12, temperature=1.0, seed=s) for s in seeds]
    with torch.inference_mode():
        return generate(
            model.model,
            model.tokenizer,
            prompts,
            params,
            stop_token_ids=turn_token_ids(model.tokenizer),
            reuse=cache.scoped(("policy", 0)) if cache is not None else None,
        )


def test_a_second_turn_starts_from_the_first_turns_kv_and_samples_the_same_tokens(nano: EmbeddedModel) -> None:
    rng = random.Random(0)
    first = [nano.tokenizer.encode(" ".join(rng.choices(WORDS, k=rng.randint(20, 40)))) for _ in range(6)]
    seeds = list(range(100, 106))
    cache = PrefixKV()
    turn1 = _sample(nano, first, seeds, cache)
    assert cache.stats.hits == 0 and len(cache) == 6  # each row left its KV (different prompts: no hit)
    tool = nano.tokenizer.encode(" the calculator says 42")
    second = [[*p, *s.token_ids, *tool] for p, s in zip(first, turn1, strict=True)]
    with_cache = _sample(nano, second, [s + 1 for s in seeds], cache)
    without = _sample(nano, second, [s + 1 for s in seeds], None)
    assert [s.token_ids for s in with_cache] == [s.token_ids for s in without]
    for a, b in zip(with_cache, without, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert cache.stats.hits == 6
    # each row took its prompt and every token it fed (its last one was never fed)
    assert cache.stats.reused_tokens == sum(
        len(p) + len(s.token_ids) - 1 for p, s in zip(first, turn1, strict=True)
    )
    assert len(cache) == 6  # the second turn's entries replaced the first's: they extend them


def test_a_batch_mixing_later_turns_and_new_calls_samples_what_it_samples_without_the_cache(
    nano: EmbeddedModel,
) -> None:
    rng = random.Random(1)
    prompts = [nano.tokenizer.encode(" ".join(rng.choices(WORDS, k=rng.randint(20, 40)))) for _ in range(6)]
    cache = PrefixKV()
    turn1 = _sample(nano, prompts[:3], [1, 2, 3], cache)
    later = [[*p, *s.token_ids, *nano.tokenizer.encode(" ok")] for p, s in zip(prompts[:3], turn1, strict=True)]
    mixed = [*later, *prompts[3:]]  # three known prefixes, three new prompts (the first pass runs them apart)
    with_cache = _sample(nano, mixed, [7, 8, 9, 10, 11, 12], cache)
    without = _sample(nano, mixed, [7, 8, 9, 10, 11, 12], None)
    assert [s.token_ids for s in with_cache] == [s.token_ids for s in without]
    for a, b in zip(with_cache, without, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert cache.stats.hits == 3


def _kv(tokens: int, width: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, 1, tokens, width), torch.zeros(1, 1, tokens, width))]


def test_the_budget_evicts_the_least_recently_used_and_a_new_version_drops_the_old() -> None:
    entry = 2 * 32 * 8 * 4  # keys and values of 32 tokens of width 8, float32
    cache = PrefixKV(budget=2 * entry)
    a, b, c = ([i] * 32 for i in (1, 2, 3))
    cache.put(("policy", 0), a, _kv(32))
    cache.put(("policy", 0), b, _kv(32))
    assert cache.lookup(("policy", 0), [*a, 9])[0] == 32  # a is now the most recently used
    cache.put(("policy", 0), c, _kv(32))  # over budget: b goes
    assert cache.nbytes == 2 * entry and len(cache) == 2
    assert cache.lookup(("policy", 0), [*b, 9]) == (0, None)
    assert cache.lookup(("policy", 0), [*c, 9])[0] == 32
    assert cache.lookup(("policy", 0), [*a[: MIN_REUSE - 1], 7, 7]) == (0, None)  # too short to take
    assert cache.lookup(("policy", 1), [*a, 9]) == (0, None)  # the weights changed: every entry is stale
    assert len(cache) == 0 and cache.nbytes == 0
    assert cache.stats.calls == 5 and cache.stats.hits == 2


def test_the_budget_takes_bytes_or_units() -> None:
    assert parse_budget("256MB") == 256 * 2**20 and parse_budget("1g") == 2**30 and parse_budget("0") == 0
    assert parse_budget(4096) == 4096 and parse_budget(None) == 512 * 2**20
    with pytest.raises(ValueError, match="kv_cache=256MB"):
        parse_budget("lots")


client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def three_turns(task: str) -> str:
    """An agent that talks three turns: each call sends the conversation so far, its replies included."""
    messages: list[Any] = [
        {"role": "system", "content": "Use calc, then answer with the number. Be brief and exact."},
        {"role": "user", "content": task},
    ]
    reply = ""
    for turn in range(3):
        answer = client.chat.completions.create(model="toy", messages=messages, max_tokens=8)
        reply = answer.choices[0].message.content or ""
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"calc says {turn}"}]
    return reply


def _run(directory: Path, budget: int, tmp: Path) -> tuple[list[list[list[int]]], dict[str, int]]:
    backend = EmbeddedBackend(str(directory), kv_cache=budget)
    trainer = tether.Trainer(model=backend, n_runners=4, seed=3, run_root=str(tmp), progress=False)
    report = trainer.dev(
        tether.wrap(three_turns, reward=lambda task, out: 0.0), [f"What is {i}+2?" for i in range(4)]
    )
    calls = [[t.response_token_ids for t in sorted(r.transitions, key=lambda t: t.step)] for r in report]
    return calls, backend.kv_stats()


def test_a_multi_turn_agent_reuses_its_turns_kv_and_gets_the_replies_it_gets_without(
    nano_dir: Path, tmp_path: Path
) -> None:
    with_cache, stats = _run(nano_dir, 64 * 2**20, tmp_path / "on")
    without, off = _run(nano_dir, 0, tmp_path / "off")
    assert all(len(calls) == 3 for calls in with_cache)
    assert with_cache == without
    assert off["calls"] == 0  # off: nothing looked up
    # the second and third turns of all four rollouts started from their previous turn's KV
    assert stats["hits"] >= 8, stats
    assert stats["reused_tokens"] > stats["prompt_tokens"] / 2, stats
