"""The calculator demo: its data and reward, and `tether demo` end to end with a tiny budget."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest
from example_modules import example_modules


@pytest.fixture(scope="module")
def calc() -> Iterator[dict[str, ModuleType]]:
    """The example's modules, imported from its folder as its scripts do (``import data``)."""
    with example_modules("calc_autogen", "data", "agent", "label_free", "judge_agreement") as modules:
        yield modules


def test_splits_are_deterministic_and_disjoint(calc: dict[str, ModuleType]) -> None:
    data = calc["data"]
    a, b = (
        data.splits(n_train=200, n_val=20, n_test=50, seed=3),
        data.splits(n_train=200, n_val=20, n_test=50, seed=3),
    )
    assert a == b
    questions = [{p.question for p in a[name]} for name in ("train", "val", "test")]
    assert questions[0].isdisjoint(questions[1]) and questions[0].isdisjoint(questions[2])
    assert {p.op for p in a["train"]} == set(data.OPS)
    assert all(float(p.answer).is_integer() for p in a["train"])  # divisions are exact


def test_demonstrations_choose_the_right_operation_at_the_given_rate(calc: dict[str, ModuleType]) -> None:
    data = calc["data"]
    problems = data.splits(n_train=2000, n_val=0, n_test=0)["train"]
    rng = random.Random(0)
    right = sum(data.demonstration_expression(p, rng, 0.4) == p.expression for p in problems)
    assert 0.36 < right / len(problems) < 0.44
    wrong = [p for p in problems if data.demonstration_expression(p, rng, 0.0) != p.expression]
    assert len(wrong) == len(problems)  # p_correct=0 always writes the confused operation


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("84", 1.0),
        ("The answer is 84.", 1.0),
        ("84.0", 1.0),
        ("83", 0.0),
        ("no number", 0.0),
        ({"text": "84"}, 1.0),
    ],
)
def test_reward_reads_the_last_number(calc: dict[str, ModuleType], output: object, expected: float) -> None:
    data = calc["data"]
    assert data.reward({"answer": 84}, output) == expected


def test_calculator_tool(calc: dict[str, ModuleType]) -> None:
    calculator = calc["agent"].calculator

    assert calculator("12*7") == "84" and calculator("7/2") == "3.5" and calculator("(3+4)-10") == "-3"
    with pytest.raises(ValueError, match="unsupported expression"):
        calculator("__import__('os')")


def test_tether_demo_runs_end_to_end_and_resumes(tmp_path: Path) -> None:
    args = [
        "--run-dir",
        str(tmp_path),
        "--n-train",
        "60",
        "--n-test",
        "8",
        "--sft-epochs",
        "1",
        "--preset",
        "nano",
    ]
    # a 1-epoch warm start of the nano model may get every preflight problem wrong: the preflight would rightly
    # stop it (tests/core/training/test_fit_preflight.py), so this smoke test of the plumbing skips it
    args += ["--tasks-per-step", "2", "--group-size", "4", "--runners", "8", "--no-preflight"]
    first = subprocess.run(
        ["tether", "demo", *args, "--steps", "2", "--eval-every", "1"], capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert "accuracy (greedy)" in first.stdout and "after the warm start alone" in first.stdout
    assert "warm start: 60 teacher rollouts" in first.stdout
    run = tmp_path / "run"
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"] == 2
    assert (run / "curve.png").stat().st_size > 1000
    teacher_db = (run / "warmstart" / "teacher.db").stat().st_mtime
    # `tether dashboard --runs <run dir>` lists every rollout of the run: the two steps' (2 tasks x 4 each) and
    # each evaluation's (8 held-out problems: greedy and sampled before training, after the warm start and at the
    # end; greedy only at step 1)
    total, modes = asyncio.run(_dashboard_rollouts(tmp_path, "run"))
    assert modes["train"] == 2 * 8 and modes["val"] == 3 * 2 * 8 + 8, modes
    assert total == sum(modes.values())
    assert "held-out tasks: 8" in first.stdout and "95 % intervals" in first.stdout
    second = subprocess.run(
        ["tether", "demo", *args, "--steps", "3", "--eval-every", "1", "--resume"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "asked" not in second.stdout
    state = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 3 and state["stage_name"] == "grpo"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in records].count("warmstart") == 1  # the warm start was not redone
    assert (run / "warmstart" / "teacher.db").stat().st_mtime == teacher_db
    # --distill: the same warm start, then tether.Distill from the first run's checkpoint instead of GRPO;
    # --eval-sampled never: every evaluation greedy only, the warm start's too
    student = tmp_path / "distilled"
    args[1] = str(student)
    distill = ["--steps", "1", "--distill", f"embedded:{run / 'checkpoint'}", "--eval-sampled", "never"]
    third = subprocess.run(
        ["tether", "demo", *args, *distill],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert third.returncode == 0, third.stderr[-3000:]
    assert "accuracy (greedy)" in third.stdout and "accuracy (T=1)" not in third.stdout
    records = [json.loads(line) for line in (student / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert len(evals) == 3 and not any("sampled_accuracy" in r for r in evals)  # before, after warm start, end
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 1 and train[0]["teacher_tokens"] > 0 and "reverse_kl" in train[0]


async def _dashboard_rollouts(runs: Path, name: str) -> tuple[int, dict[str, int]]:
    """How many rollouts the dashboard over ``runs`` lists for the run ``name``, and how many of each mode."""
    from tether.dashboard.server import start_dashboard
    from tether.dashboard.sources import Sources

    server = await start_dashboard(Sources(None, str(runs)))
    try:
        async with aiohttp.ClientSession() as http:
            sources = await (await http.get(f"{server.url}api/sources")).json()
            assert name in [s["name"] for s in sources["sources"]], sources
            modes = {}
            for mode in ("train", "val"):
                params = {"source": name, "mode": mode, "limit": "1"}
                modes[mode] = (await (await http.get(f"{server.url}api/rollouts", params=params)).json())["total"]
            everything = await (await http.get(f"{server.url}api/rollouts", params={"source": name})).json()
    finally:
        await server.stop()
    return everything["total"], modes


def _judge_agreement(judge_agreement: ModuleType, score: Any, groups: int = 6) -> dict[str, Any]:
    """``judge_agreement.measure`` against a scripted judge on the fake LLM."""
    from tether.testing.fake_llm import FakeLLM, text
    from tether.testing.judge import judge_handler

    async def run() -> dict[str, Any]:
        handler = judge_handler(score) if callable(score) else (lambda request: text(str(score)))
        async with FakeLLM(handler=handler) as judge:
            return await judge_agreement.measure(judge.base_url, groups, 4, 0, 256)

    return asyncio.run(run())


def test_judge_agreement_scores_a_judges_ranking_against_the_labels(calc: dict[str, ModuleType]) -> None:
    data, measured = calc["data"], calc["judge_agreement"]
    answers = {p.question: p.answer for p in data.splits(seed=0)["test"]}

    def right(task: str, attempt: str) -> float:
        (answer,) = [a for q, a in answers.items() if q in task]
        return data.reward({"answer": answer}, attempt)

    perfect = _judge_agreement(measured, right)
    assert perfect["parsed"] == 6 and perfect["parse_failures"] == 0
    assert perfect["pairwise_agreement"] == 1.0 and perfect["top_pick_right"] == 1.0
    assert perfect["lenient_pairwise_agreement"] == 1.0
    inverted = _judge_agreement(measured, lambda task, attempt: 1.0 - right(task, attempt))
    assert inverted["pairwise_agreement"] == 0.0 and inverted["top_pick_right"] == 0.0
    flat = _judge_agreement(measured, lambda task, attempt: 0.5)
    assert flat["pairwise_agreement"] == 0.5  # ties count half
    # a reply that is not scores fails its group; read leniently, numbers outside [0, 1] still rank
    assert _judge_agreement(measured, "no idea")["parse_failures"] == 6
    scaled = _judge_agreement(
        measured,
        '{"scores": [{"id": "t1", "score": 7}, {"id": "t2", "score": 3}, '
        '{"id": "t3", "score": 3}, {"id": "t4", "score": 3}]}',
    )
    assert scaled["parsed"] == 0 and scaled["lenient_parsed"] == 6


def test_fresh_problems_are_new_and_deterministic(calc: dict[str, ModuleType]) -> None:
    data = calc["data"]
    seen = data.splits(n_train=300, n_val=0, n_test=50, seed=1)
    old = seen["train"] + seen["test"]
    fresh = data.fresh(200, 1, old)
    assert fresh == data.fresh(200, 1, old) and len(fresh) == 200
    assert {p.question for p in fresh}.isdisjoint(p.question for p in old)
    assert len({p.question for p in fresh}) == 200


def _run_output(question: str, expressions: list[str], final: str) -> Any:
    """What the AutoGen adapter returns for a run that asked ``question`` and called the calculator with each of
    ``expressions`` (real AutoGen messages through the adapter's ``summarize``)."""
    from autogen_agentchat.base import TaskResult
    from autogen_agentchat.messages import TextMessage, ToolCallRequestEvent, ToolCallSummaryMessage
    from autogen_core import FunctionCall

    from tether_autogen.adapter import summarize

    calls = [
        FunctionCall(id=str(n), name="calculator", arguments=json.dumps({"expression": e}))
        for n, e in enumerate(expressions)
    ]
    messages: list[Any] = [TextMessage(source="user", content=question)]
    if calls:
        messages.append(ToolCallRequestEvent(source="calculator_agent", content=calls))
    messages.append(ToolCallSummaryMessage(source="calculator_agent", content=final, tool_calls=calls, results=[]))
    return summarize(TaskResult(messages=messages))


@pytest.mark.parametrize(
    ("expressions", "final", "expected"),
    [
        (["33-2"], "31", "31"),  # the problem's numbers, in order: a vote (right or wrong is not its business)
        (["33+2"], "35", "35"),
        (["32-2"], "30", None),  # a number the problem never gave: no vote
        (["2-33"], "-31", None),  # the problem's numbers out of order
        (["33-2", "33+2"], "35", None),  # more than one call
        ([], "31", None),  # no call at all
    ],
)
def test_checked_number_votes_only_for_calls_using_the_problems_numbers(
    calc: dict[str, ModuleType], expressions: list[str], final: str, expected: str | None
) -> None:
    label_free = calc["label_free"]
    output = _run_output("A shop had 33 balls and sold 2. How many balls remain?", expressions, final)
    assert label_free.checked_number(output) == expected
    assert label_free.checked_number("31") is None  # not an agent's output: nothing to check against
