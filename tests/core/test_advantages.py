"""Group-relative advantages: per rollout, grouped by task, shared by the rollout's transitions."""

from __future__ import annotations

import pytest

from tether.algorithms import assign, group_advantages
from tether.types import Rollout, RolloutStatus, Transition


def _rollout(rid: str, task: str, reward: float | None) -> Rollout:
    return Rollout(rollout_id=rid, input="x", task_id=task, status=RolloutStatus.SUCCEEDED, reward=reward)


def _transition(rid: str, step: int, trainable: bool = True) -> Transition:
    return Transition(
        rollout_id=rid,
        attempt_id="a",
        task_id="t",
        agent_name="agent",
        step=step,
        messages=[],
        response={},
        prompt_token_ids=[1],
        response_token_ids=[2],
        logprobs=[-1.0],
        reward=0.0,
        trainable=trainable,
    )


def test_advantages_are_per_rollout_within_task_groups() -> None:
    rollouts = [
        _rollout("r1", "A", 1.0),
        _rollout("r2", "A", 0.0),
        _rollout("r3", "B", 0.0),
        _rollout("r4", "B", 0.0),
        _rollout("r5", "B", 1.0),
        _rollout("r6", "B", 0.0),
    ]
    stats = group_advantages(rollouts)
    assert stats.groups == 2 and stats.flat_groups == 0 and stats.rollouts == 6
    assert stats.per_rollout["r1"] == pytest.approx(1.0, abs=1e-4)
    assert stats.per_rollout["r2"] == pytest.approx(-1.0, abs=1e-4)
    # group B: mean 0.25, std sqrt(3)/4
    assert stats.per_rollout["r5"] == pytest.approx(0.75 / (3**0.5 / 4), abs=1e-4)
    assert stats.per_rollout["r3"] == pytest.approx(-0.25 / (3**0.5 / 4), abs=1e-4)


def test_a_long_rollout_does_not_weigh_more_and_its_transitions_share_one_advantage() -> None:
    stats = group_advantages([_rollout("long", "A", 1.0), _rollout("short", "A", 0.0)])
    transitions = [_transition("long", i) for i in range(5)] + [_transition("short", 0)]
    trained = assign(transitions, stats)
    assert {t.advantage for t in transitions if t.rollout_id == "long"} == {stats.per_rollout["long"]}
    assert stats.per_rollout["long"] == pytest.approx(-stats.per_rollout["short"])
    assert len(trained) == 6


def test_flat_groups_give_zero_advantage_and_are_counted() -> None:
    stats = group_advantages([_rollout("r1", "A", 1.0), _rollout("r2", "A", 1.0), _rollout("r3", "B", 0.0)])
    assert stats.flat_groups == 2
    assert assign([_transition("r1", 0), _transition("r2", 0)], stats) == []


def test_untrainable_transitions_and_unrewarded_rollouts_are_left_out() -> None:
    stats = group_advantages([_rollout("r1", "A", 1.0), _rollout("r2", "A", 0.0), _rollout("r3", "A", None)])
    assert "r3" not in stats.per_rollout and stats.rollouts == 2
    trained = assign([_transition("r1", 0, trainable=False), _transition("r2", 0)], stats)
    assert [t.rollout_id for t in trained] == ["r2"]


def test_without_std_scaling_advantage_is_reward_minus_mean() -> None:
    stats = group_advantages([_rollout("r1", "A", 3.0), _rollout("r2", "A", 1.0)], scale_by_std=False)
    assert stats.per_rollout == {"r1": 1.0, "r2": -1.0}
