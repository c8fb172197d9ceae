"""The runner and Trainer.dev, end to end over real HTTP: a toy adapter whose agents are plain dicts and
which calls the proxy URL it is given, the proxy, a store, and the scripted fake LLM."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runner_agents import dev, dict_agent_plugins

import tether
from tether import spans
from tether.testing.fake_llm import FakeLLM, Reply, text
from tether.types import AttemptStatus, RolloutStatus, SpanKind


@pytest.fixture(autouse=True)
def _plugins() -> Iterator[None]:
    with dict_agent_plugins():
        yield


async def test_dev_captures_calls_rewards_and_token_ids() -> None:
    agent = tether.wrap({"name": "solver", "calls": 2}, reward=lambda task, out: float(out == f"answer to {task}"))
    report = await dev(agent, ["q1", "q2 tool"])
    by_input = {r.rollout.input: r for r in report}
    ok, tooly = by_input["q1"], by_input["q2 tool"]
    assert ok.status == RolloutStatus.SUCCEEDED and ok.reward == 1.0 and ok.output == "answer to q1"
    assert [t.agent_name for t in ok.transitions] == ["solver", "solver"]
    assert all(t.response_token_ids and t.prompt_token_ids for t in ok.transitions)
    assert bytes(ok.transitions[0].response_token_ids).decode() == "answer to q1"
    assert tooly.reward == 0.0
    tools = [s for s in tooly.spans if s.kind == SpanKind.TOOL]
    assert [s.attributes[spans.TOOL_NAME] for s in tools] == ["add", "add"]
    assert "solver → LLM: calls add(" in str(tooly) and "tool add(" in str(tooly)
    assert report.metrics()["llm_calls_per_rollout"] == 2.0


async def test_a_failing_rollout_does_not_stop_the_others() -> None:
    good = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    bad = tether.wrap({"name": "a", "calls": 1, "raise": "boom"}, reward=lambda t, o: 1.0)
    report = await dev(bad, ["x"])
    (failed,) = report.rollouts
    assert failed.status == RolloutStatus.FAILED
    assert "RuntimeError: boom" in (failed.error or "") and "Traceback" in (failed.error or "")
    report = await dev(good, ["x", "y", "z"])
    assert [r.status for r in report] == [RolloutStatus.SUCCEEDED] * 3


async def test_non_finite_or_non_numeric_reward_is_an_error_not_a_zero() -> None:
    for bad in (float("nan"), "1.0", None.__class__):
        agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o, bad=bad: bad)
        (rollout,) = (await dev(agent, ["x"])).rollouts
        assert rollout.status == RolloutStatus.FAILED
        assert "reward must be a finite number" in (rollout.error or "")


def _raise(task: Any, output: Any) -> float:
    raise KeyError("answer")


@pytest.mark.parametrize(
    ("reward", "why"),
    [(_raise, "KeyError: 'answer'"), (lambda t, o: float("nan"), "reward must be a finite number, got nan")],
    ids=["raises", "nan"],
)
async def test_dev_report_says_how_many_rollouts_failed_and_why(reward: Any, why: str) -> None:
    report = await dev(tether.wrap({"name": "a", "calls": 1}, reward=reward), ["x", "y", "z"])
    assert [r.status for r in report] == [RolloutStatus.FAILED] * 3
    assert report.problems[0].startswith("3 of 3 rollouts failed"), report.problems
    assert why in report.problems[0]
    assert all(why in p for r in report for p in r.problems), "each failed rollout says why"
    assert not any("made no LLM call" in p for p in report.all_problems)
    metrics = report.metrics()
    assert metrics["failed"] == 3.0
    assert math.isnan(metrics["mean_reward"]), "no rollout has a reward: the mean is not 0.0"
    assert "3 of 3 rollouts failed" in str(report)


@pytest.mark.parametrize("swallow", [False, True], ids=["agent-raises", "agent-swallows-the-error"])
async def test_dev_report_names_the_backend_error_of_a_dead_model_url(swallow: bool) -> None:
    with socket.socket() as probe:  # a port nothing listens on: the backend's requests are refused
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    agent = tether.wrap({"name": "a", "calls": 1, "swallow_errors": swallow}, reward=lambda t, o: 1.0)
    report = await tether.Trainer(model=dead).adev(agent, ["x"])
    (rollout,) = report.rollouts
    problems = " ".join(report.all_problems)
    assert "made no LLM call" not in problems, problems
    assert "the model backend failed" in problems and dead.removesuffix("/v1") in problems, problems
    failed_calls = [s for s in rollout.spans if s.kind == SpanKind.LLM]
    assert len(failed_calls) == 1 and failed_calls[0].attributes[spans.ERROR], "the failed call is on record"
    assert not rollout.transitions, "a failed call is never a transition"
    assert "LLM error" in str(rollout)


async def test_emit_reward_scores_a_rollout_without_reward_function() -> None:
    agent = tether.wrap({"name": "a", "calls": 1, "emit": 0.5})
    (rollout,) = (await dev(agent, ["x"])).rollouts
    assert rollout.reward == 0.5
    assert any(s.kind == SpanKind.REWARD and s.attributes[spans.REWARD_VALUE] == 0.5 for s in rollout.spans)


async def test_a_reward_mapping_scores_each_sub_agent_and_the_rollout_by_their_mean() -> None:
    # a mapping names sub-agents or policies (here the policy "main" that serves solver; dev runs a policy map
    # on a remote model)
    agent = tether.wrap(
        {"name": "solver", "calls": 2},
        reward=lambda t, o: {"solver": 1.0, "main": 0.25},
        optimize={"main": ["solver"]},
    )
    report = await dev(agent, ["x", "y"])
    rollout = report.rollouts[0]
    assert rollout.reward == 0.625  # the mean of the mapping's values
    finals = {
        s.attributes[spans.REWARD_TARGET]: s.attributes[spans.REWARD_VALUE]
        for s in rollout.spans
        if s.kind == SpanKind.REWARD and s.attributes.get(spans.REWARD_FINAL)
    }
    assert finals == {"solver": 1.0, "main": 0.25}
    assert [(t.target, t.target_reward) for t in rollout.transitions] == [("solver", 1.0)] * 2
    metrics = report.metrics()
    assert metrics["mean_reward"] == 0.625 and metrics["mean_reward/main"] == 0.25
    assert metrics["mean_reward/solver"] == 1.0


@pytest.mark.parametrize(
    ("mapping", "why"),
    [({"solver": math.nan}, "reward= returned {'solver': nan}"), ({}, "reward= returned an empty mapping")],
)
async def test_a_bad_reward_mapping_fails_the_rollout_with_what_is_wrong(mapping: Any, why: str) -> None:
    report = await dev(tether.wrap({"name": "solver", "calls": 1}, reward=lambda t, o: mapping), ["x"])
    assert report.rollouts[0].status == RolloutStatus.FAILED
    assert why in " ".join(report.all_problems)


async def test_dev_shows_each_calls_policy_and_advantage_under_the_credit_rule() -> None:
    agent = tether.wrap({"name": "solver", "calls": 2, "emit": 0.5, "emit_for": "solver"}, optimize=["solver"])
    report = await dev(agent, ["x"], credit="per_call")
    (rollout,) = report.rollouts
    # one rollout: both calls are alone at their position and fall back to the task's 'solver' calls, whose
    # returns are 0.5 (the final reward) and 1.0 (the reward emitted for the latest call, plus the final one)
    assert [t.reward for t in rollout.transitions] == [0.5, 1.0]
    lines = [line for line in str(rollout).splitlines() if "LLM:" in line]
    assert lines[0].endswith("· policy=policy trains adv=-1.00"), lines
    assert lines[1].endswith("· policy=policy trains adv=+1.00"), lines
    assert report.notes == []


async def test_dev_repeats_tasks_into_groups_and_notes_a_rule_that_cannot_apply() -> None:
    seen: set[str] = set()

    def first_run_wins(task: str, output: Any) -> float:  # one rollout of each task scores 1, the other 0
        won = task not in seen
        seen.add(task)
        return float(won)

    report = await dev(
        tether.wrap({"name": "a", "calls": 1}, reward=first_run_wins), ["x", "y"], 2, credit="per_call"
    )
    assert [r.rollout.task_id for r in report][::2] == [r.rollout.task_id for r in report][1::2]
    advantages = {r.rollout.rollout_id: r.transitions[0].advantage for r in report}
    assert sorted(advantages.values()) == pytest.approx([-1.0, -1.0, 1.0, 1.0], abs=1e-4)
    for r in report:
        assert (r.reward == 1.0) == (advantages[r.rollout.rollout_id] > 0)
    assert any("credit='per_call' found no emitted rewards" in n for n in report.notes)
    assert "note: credit='per_call' found no emitted rewards" in str(report)


def test_emit_reward_for_a_bad_agent_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"emit_reward\(agent=\.\.\.\) takes a sub-agent or policy name"):
        tether.emit_reward(1.0, agent="")


async def test_missing_reward_and_missing_llm_calls_are_reported() -> None:
    report = await dev(tether.wrap({"name": "a", "calls": 0}), ["x"])
    problems = " ".join(report.all_problems)
    assert "has no reward" in problems and "made no LLM call" in problems


async def test_unknown_optimize_name_is_reported_with_captured_agents() -> None:
    report = await dev(tether.wrap({"name": "solver", "calls": 1}, optimize=["writer"]), ["x"])
    assert report.problems == ["unknown sub-agent 'writer' in optimize=; captured agents are: solver"]


async def test_timeout_fails_the_attempt_and_retries_up_to_max_attempts(tmp_path: Path) -> None:
    def slow(request: dict[str, Any]) -> Reply:
        return text("late", delay_s=3.0)

    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with FakeLLM(handler=slow) as llm:
        trainer = tether.Trainer(model=llm.base_url, store=store_url, timeout_s=0.2, max_attempts=2)
        (rollout,) = (await trainer.adev(agent, ["x"])).rollouts
    assert rollout.status == RolloutStatus.FAILED and rollout.attempts == 2
    # the runner noticing its own timeout and the store's sweep end an attempt the same way
    assert rollout.error == "attempt timed out after 0.2 s"
    store = tether.open_store(store_url)
    try:
        attempts = await store.get_attempts(rollout.rollout.rollout_id)
    finally:
        await store.close()
    assert [a.status for a in attempts] == [AttemptStatus.TIMEOUT] * 2


async def test_rollouts_run_concurrently() -> None:
    def slow(request: dict[str, Any]) -> Reply:
        return text("ok", delay_s=0.3)

    agent = tether.wrap({"name": "a", "calls": 1}, reward=lambda t, o: 1.0)
    async with FakeLLM(handler=slow) as llm:
        trainer = tether.Trainer(model=llm.base_url, n_runners=8)
        report = await trainer.adev(agent, [f"t{i}" for i in range(8)])
    assert all(r.status == RolloutStatus.SUCCEEDED for r in report)
    # every model call was in flight at once: the last one started before the first one ended
    calls = [s for r in report for s in r.spans if s.kind == SpanKind.LLM]
    assert len(calls) == 8
    assert max(s.start_time for s in calls) < min(s.start_time + s.attributes["latency_ms"] / 1000 for s in calls)


def test_emit_reward_outside_a_rollout_raises() -> None:
    with pytest.raises(RuntimeError, match="outside a tether rollout"):
        tether.emit_reward(1.0)
