"""The chain_calc example: its problems and step checks, its demonstrations, and the unchanged agent function
running through tether against the fake LLM, with each calculator result's reward captured for its call."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from example_modules import example_modules

import tether
from tether.models.remote import RemoteBackend
from tether.testing.fake_llm import FakeLLM, text, tool_call


@pytest.fixture(scope="module")
def chain() -> Iterator[dict[str, ModuleType]]:
    """The example's modules, imported from its folder as its scripts do, then taken out of ``sys.modules``
    again so that other examples' ``data`` / ``agent`` / ``train`` modules are not confused with them."""
    with example_modules("chain_calc", "data", "agent", "train", "compare") as modules:
        yield modules


def test_problems_chain_two_or_three_steps_and_splits_are_disjoint(chain: dict[str, ModuleType]) -> None:
    data = chain["data"]
    first = data.splits(n_train=200, n_val=0, n_test=50)
    assert first == data.splits(n_train=200, n_val=0, n_test=50)
    assert not {p.question for p in first["train"]} & {p.question for p in first["test"]}
    assert {len(p.ops) for p in first["train"]} == {2, 3}
    for problem in first["train"]:
        assert all(str(n) in problem.question for n in problem.numbers)
        value = float(problem.numbers[0])
        for k, result in enumerate(problem.results):
            assert data.step_reward(problem.task(), k, value, result) == 1.0
            assert data.step_reward(problem.task(), k, value, result + 1) == 0.0
            value = result
        assert data.reward(problem.task(), {"answer": f"It is {problem.answer:g}."}) == 1.0
        assert data.reward(problem.task(), {"answer": "no idea"}) == 0.0


async def test_the_scripted_teacher_confuses_operations_but_keeps_the_format(chain: dict[str, ModuleType]) -> None:
    """The warm start's teacher (a stand-in for an API model): one calculator call per step, half of the steps'
    operations confused, the same ones each time a problem is asked."""
    data, agent, train = chain["data"], chain["agent"], chain["train"]
    problems = data.splits(n_train=60, n_val=0, n_test=0)["train"]
    async with train.scripted_teacher(problems, 0.5, seed=0) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            wrapped = tether.wrap(agent.solve, reward=data.reward, run=train.step_runner())
            report = await tether.Trainer(model=backend, progress=False, n_runners=8).adev(
                wrapped, [p.task() for p in problems]
            )
        finally:
            await backend.close()
    assert 0.05 < report.metrics()["mean_reward"] < 0.6
    problem, first = problems[0], report.rollouts[0]
    assert len(first.transitions) == len(problem.ops) + 1  # one call per step, then the answer
    ops = data.demonstration_ops(problem, random.Random(f"0:{problem.question}"), 0.5)
    call = first.transitions[0].response["tool_calls"][0]["function"]
    assert json.loads(call["arguments"])["expression"] == f"{problem.numbers[0]}{ops[0]}{problem.numbers[1]}"


def _half_right_model(problems: dict[str, Any], data: ModuleType) -> Any:
    """Applies the right operation on odd steps (1st, 3rd) and the confused one on the 2nd, each time to the
    last calculator result; then answers with that result."""

    def handler(request: dict[str, Any]) -> Any:
        messages = request["messages"]
        problem = problems[messages[1]["content"]]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        k = len(results)
        if k == len(problem.ops):
            return text(results[-1])
        op = problem.ops[k] if k != 1 else data.CONFUSED[problem.ops[k]]
        left = results[-1] if results else str(problem.numbers[0])
        return tool_call("calculator", {"expression": f"{left}{op}{problem.numbers[k + 1]}"})

    return handler


@pytest.mark.parametrize("credit", ["episode", "per_call"])
async def test_each_step_reward_is_captured_for_the_call_that_asked_for_it(
    chain: dict[str, ModuleType], credit: str
) -> None:
    data, agent, train = chain["data"], chain["agent"], chain["train"]
    problems = data.splits(n_train=8, n_val=0, n_test=0)["train"]
    by_question = {p.question: p for p in problems}
    async with FakeLLM(handler=_half_right_model(by_question, data)) as llm:
        backend = RemoteBackend(llm.base_url)
        try:
            trainer = tether.Trainer(model=backend, progress=False, credit=credit)  # type: ignore[arg-type]
            wrapped = tether.wrap(agent.solve, reward=data.reward, run=train.step_runner())
            report = await trainer.adev(wrapped, [p.task() for p in problems])
        finally:
            await backend.close()
    assert not report.all_problems
    for rollout in report.rollouts:
        problem = by_question[rollout.rollout.input["question"]]
        steps = len(problem.ops)
        # step 2 is wrong; step 3 is right on the agent's own (wrong) result, so it earns its reward
        expected = [1.0, 0.0, 1.0][:steps]
        emitted = [
            s.attributes[tether.spans.REWARD_VALUE] for s in rollout.spans if s.kind == tether.SpanKind.REWARD
        ]
        assert emitted == expected
        assert rollout.reward == 0.0  # the second step was wrong, so the answer is
        assert len(rollout.transitions) == steps + 1  # one call per step, then the answer
        rewards = [t.reward for t in rollout.transitions]
        if credit == "per_call":
            assert rewards == [*expected, 0.0]  # each call carries the reward emitted for its tool result
        else:
            assert rewards == [0.0] * (steps + 1)  # the episode rule ignores emitted rewards


def test_compare_finds_the_first_step_reaching_the_target(chain: dict[str, ModuleType], tmp_path: Path) -> None:
    compare = chain["compare"]
    assert compare.first_reaching([(0, 0.2), (5, 0.4), (10, 0.55), (15, 0.5)], 0.55) == 10
    assert compare.first_reaching([(0, 0.2), (5, 0.4)], 0.55) is None
    for rule, finals in (("episode", (0.5, 0.6)), ("per_call", (0.7, 0.5))):
        for seed, final in zip((1, 2), finals, strict=True):
            curve = [{"step": 0, "greedy": 0.2, "sampled": 0.2}, {"step": 5, "greedy": 0.6, "sampled": final}]
            curve.append({"step": 10, "greedy": final, "sampled": final})
            run = tmp_path / f"{rule}-s{seed}"
            run.mkdir()
            (run / "curve.json").write_text(json.dumps({"seed": seed, "steps": 10, "curve": curve}))
    train = [{"kind": "train", "step": step, "reward": 0.1 * step} for step in range(1, 11)]
    (tmp_path / "per_call-s1" / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in train))
    text_ = compare.report(tmp_path, [1, 2])
    assert "- per_call, steps 1-4: 25.0% ± 0.0%" in text_ and "- per_call, last 4 steps: 85.0% ± 0.0%" in text_
    assert "target (episode mean final accuracy after 10 steps): 55.0%" in text_
    assert "per_call seed 1: reaches it at step 5 (50% of 10)" in text_
    assert "per_call seed 2: reaches it at step 5 (50% of 10)" in text_  # greedy 60% at step 5


def test_train_script_warm_starts_and_runs_a_per_call_step(
    chain: dict[str, ModuleType], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train.py`` end to end on a tiny budget: warm start, one GRPO step with ``credit="per_call"``, the
    curve file ``compare.py`` reads. Needs torch: runs in the ``embedded`` tox env (``core`` has no torch)."""
    pytest.importorskip("torch")
    train = chain["train"]
    argv = ["--run-root", str(tmp_path), "--preset", "nano", "--n-train", "16", "--n-test", "4"]
    argv += ["--sft-epochs", "1"]
    argv += ["--credit", "per_call", "--seed", "3", "--steps", "1", "--eval-every", "1", "--tasks-per-step", "2"]
    # a 1-epoch warm start of the nano model may score 0 on every preflight rollout, which fit would rightly stop
    argv += ["--group-size", "2", "--runners", "4", "--no-preflight"]
    assert train.main(argv) == 0
    records = [json.loads(line) for line in (tmp_path / "warmstart" / "metrics.jsonl").read_text().splitlines()]
    (teacher,) = [r for r in records if r["kind"] == "warmstart"]
    assert teacher["teacher_rollouts"] == teacher["kept"] == 16
    assert (tmp_path / "warmstart" / "checkpoint" / "config.json").exists()
    curve = json.loads((tmp_path / "per_call-s3" / "curve.json").read_text())
    assert curve["credit"] == "per_call" and [p["step"] for p in curve["curve"]] == [0, 1]
    records = [json.loads(line) for line in (tmp_path / "per_call-s3" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if r["kind"] == "train"]
    assert step["rollouts"] == 4 and step["failed"] == 0
    assert "credit=per_call" in capsys.readouterr().out
