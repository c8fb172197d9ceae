"""GRPO on the embedded model with rewards that need no answer key: a scripted judge (the fake LLM answering
``tether.Judge``'s JSON) and ``tether.MajorityVote``, each in a short ``Trainer.fit`` through the whole stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")

import tether  # noqa: E402
from tether.testing.fake_llm import FakeLLM  # noqa: E402
from tether.testing.judge import judge_handler  # noqa: E402

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)
GOOD = {"a", "b"}


def pick_letter(task: str) -> str:
    reply = client.chat.completions.create(model="toy", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


def _tasks(n: int, offset: int = 0) -> list[str]:
    return [f"Pick a letter, round {offset + i}." for i in range(n)]


_EVAL_REWARDS = ("greedy_rewards", "sampled_rewards")


def _trainer(checkpoint: Path, run_root: Path, steps: int, **kwargs: Any) -> tether.Trainer:
    return tether.Trainer(
        model=f"embedded:{checkpoint}",
        algorithm=tether.GRPO(group_size=4, tasks_per_step=2, lr=2e-3),
        n_runners=4,
        steps=steps,
        eval_every=steps,
        name="run",
        run_root=str(run_root),
        progress=False,
        sampling={"max_tokens": 4},
        seed=1,
        **kwargs,
    )


def _good(task: str, attempt: str) -> float:
    return 1.0 if attempt.rsplit("final output: ", 1)[-1].strip() in GOOD else 0.0


def test_grpo_trains_on_a_judges_scores(warm_start: Path, tmp_path: Path) -> None:
    with FakeLLM(handler=judge_handler(_good)) as judge_llm:
        agent = tether.wrap(pick_letter, reward=tether.Judge(judge_llm.base_url))
        result = _trainer(warm_start, tmp_path, steps=3).fit(agent, train=_tasks(8), val=_tasks(2, offset=100))
        asked = len(judge_llm.chat_requests)
    train = [h for h in result.history if h["kind"] == "train"]
    assert len(train) == 3 and all(h["failed"] == 0 for h in train)
    assert all(h["judge/calls"] == 2 for h in train)  # one call per group: two tasks a step
    assert sum(h["trained"] for h in train) > 0
    # the judge's calls never reach the policy: every transition is the agent's one call
    assert all(h["transitions"] == 8 for h in train)
    cost = result.judge_cost
    # the steps' groups, and each evaluated rollout judged alone (greedy rollouts that repeat: from the cache)
    evaluated = sum(len(h.get(k, [])) for h in result.history if h["kind"] == "eval" for k in _EVAL_REWARDS)
    assert evaluated >= 2 * 2 * 2 and cost["judge/calls"] + cost["judge/cache_hits"] == 3 * 2 + evaluated
    assert cost["judge/prompt_tokens"] > 0 and asked == cost["judge/calls"] + 4  # (+ the preflight's 4 groups)
    assert f"judge: {cost['judge/calls']:.0f} calls, {cost['judge/prompt_tokens']:.0f} prompt" in result.summary()


def test_grpo_trains_on_majority_vote_and_warns_when_answers_differ(warm_start: Path, tmp_path: Path) -> None:
    # a label as the answer (is it a good letter?): the nano model's raw replies rarely repeat within a group
    agent = tether.wrap(pick_letter, reward=tether.MajorityVote(extract=lambda output: output.strip() in GOOD))
    result = _trainer(warm_start, tmp_path / "agree", steps=2).fit(agent, train=_tasks(8))
    train = [h for h in result.history if h["kind"] == "train"]
    assert len(train) == 2 and all(h["failed"] == 0 for h in train)
    assert all(0.5 <= h["majority/agreement"] <= 1.0 and h["majority/groups"] == 2 for h in train)
    assert all(h["reward"] >= 0.25 for h in train)  # each rollout agrees with itself at least

    counter = iter(range(10_000))
    unique = tether.wrap(pick_letter, reward=tether.MajorityVote(extract=lambda output: next(counter)))
    trainer = _trainer(warm_start, tmp_path / "differ", steps=1, stop_after_idle_steps=None)
    with pytest.warns(UserWarning, match="every answer differed within each of the batch's 2 groups"):
        differ = trainer.fit(unique, train=_tasks(8), preflight=False)
    (step,) = [h for h in differ.history if h["kind"] == "train"]
    assert step["majority/all_different"] == 2 and step["trained"] == 0


def test_a_local_judge_that_cannot_answer_the_schema_fails_its_group_showing_its_reply(warm_start: Path) -> None:
    # the nano model as judge, through its own embedded backend: it answers letters, never the scores' JSON
    judge = tether.Judge(f"embedded:{warm_start}", retries=1, max_tokens=4)
    trainer = tether.Trainer(model=f"embedded:{warm_start}", sampling={"max_tokens": 4}, progress=False)
    report = trainer.dev(tether.wrap(pick_letter, reward=judge), _tasks(1), repeats=2)
    assert [r.reward for r in report] == [None, None]
    error = report[0].error or ""
    assert f"GroupRewardError: Judge(model='embedded:{warm_start}') gave no valid scores in 2 tries" in error
    assert "its last reply:" in error
