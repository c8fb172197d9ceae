"""tether transitions → verl rows, checked through verl's own code: its ``AgentLoopOutput`` (the pydantic model
its agent loops return, and its ``as_dict`` tensors), its row store format and its V1 GRPO advantage
computation (``compute_advantage_for_multi_trajectories``). The advantages must follow tether's per-rollout
rule: every LLM call of a rollout gets the rollout's group-relative advantage, calls of sub-agents outside
``optimize=`` get none."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

from tether.algorithms.verl.rows import Row, rollout_rows
from tether.types import Rollout, Transition

Advantages = Callable[[Sequence[str], Sequence[dict[str, Any]], int], Any]


def _call(
    rollout: str, step: int, agent: str, prompt: list[int], response: list[int], trainable: bool
) -> Transition:
    return Transition(
        rollout_id=rollout,
        attempt_id=f"at-{rollout}",
        task_id="task",
        agent_name=agent,
        step=step,
        messages=[{"role": "user", "content": "q"}] * (step + 1),
        response={"role": "assistant", "content": "a"},
        prompt_token_ids=prompt,
        response_token_ids=response,
        logprobs=[-0.1 * (i + 1) for i in range(len(response))],
        reward=0.0,
        trainable=trainable,
    )


def _rollout(
    name: str, rewarded: float, calls: int, last_untrained: bool = False
) -> tuple[Rollout, list[Transition]]:
    transitions = [
        _call(name, i, "writer", [7, 8, 9 + i], [20 + i, 21 + i, 22 + i], trainable=True) for i in range(calls)
    ]
    if last_untrained:
        transitions.append(_call(name, calls, "checker", [7, 8], [30, 31], trainable=False))
    return Rollout(rollout_id=name, input="x", task_id=f"task-of-{name[0]}", reward=rewarded), transitions


def _stored(rows: list[Row], session: int) -> list[dict[str, Any]]:
    """Each row as verl's V1 agent-loop worker stores it: ``AgentLoopOutput(...).as_dict()`` plus the
    sample's fields (its ``uid``)."""
    out = []
    for row in rows:
        output = AgentLoopOutput(**row.output_fields(), metrics=AgentLoopMetrics())
        field = output.as_dict()
        field.update({"uid": row.uid, "session_id": session})
        out.append(field)
    return out


GROUPS = {  # uid -> the rollouts of one task: (name, reward, trained calls, ends with an untrained call)
    "uid-a": [("a0", 1.0, 2, True), ("a1", 0.0, 1, False), ("a2", 0.0, 1, True)],
    "uid-b": [("b0", 0.2, 1, False), ("b1", 0.5, 3, False), ("b2", 0.9, 1, True), ("b3", 0.9, 2, False)],
}


def _batch() -> tuple[list[str], list[dict[str, Any]], dict[str, list[Transition]], list[Rollout], list[Row]]:
    keys, fields, by_rollout, rollouts, all_rows = [], [], {}, [], []
    for uid, members in GROUPS.items():
        for session, (name, reward, calls, untrained) in enumerate(members):
            rollout, transitions = _rollout(name, reward, calls, untrained)
            rows = rollout_rows(transitions, reward=rollout.reward, uid=uid, session=session)
            keys += [r.key for r in rows]
            fields += _stored(rows, session)
            by_rollout[name] = transitions
            rollouts.append(rollout)
            all_rows += rows
    return keys, fields, by_rollout, rollouts, all_rows


def _group_reference(rollouts: list[Rollout], *, scale_by_std: bool = True, eps: float = 1e-6) -> dict[str, float]:
    """The per-rollout group advantage, written out: reward minus its task's mean, over the std (0 if flat)."""
    groups: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        if rollout.reward is not None:
            groups.setdefault(rollout.task_id, []).append(rollout)
    out = {}
    for members in groups.values():
        rewards = [float(r.reward or 0.0) for r in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards))
        for rollout, reward in zip(members, rewards, strict=True):
            out[rollout.rollout_id] = 0.0 if std < eps else (reward - mean) / (std + eps if scale_by_std else 1.0)
    return out


def test_rows_carry_the_calls_ids_masks_logprobs_and_the_rollouts_reward() -> None:
    _, transitions = _rollout("a0", 1.0, 2, last_untrained=True)
    rows = rollout_rows(transitions, reward=1.0, uid="uid-a", session=3)
    assert [r.key for r in rows] == ["uid-a_3_0", "uid-a_3_1", "uid-a_3_2"]
    # the untrained call first, so the row verl reads the session's advantage from (the last) is a trained one
    assert [r.extra_fields["tether"]["agent"] for r in rows] == ["checker", "writer", "writer"]
    checker, first, second = rows
    assert checker.response_mask == [0, 0] and first.response_mask == [1, 1, 1] == second.response_mask
    assert (first.prompt_ids, first.response_ids) == ([7, 8, 9], [20, 21, 22])
    assert first.response_logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert {r.reward_score for r in rows} == {1.0}
    assert first.num_turns == 2 and second.num_turns == 3  # the call's messages and its answer

    stored = _stored(rows, session=3)[1]  # verl's own tensors of the row
    assert stored["prompts"].tolist() == [7, 8, 9] and stored["responses"].tolist() == [20, 21, 22]
    assert stored["response_mask"].tolist() == [1, 1, 1]
    assert stored["rollout_log_probs"].tolist() == pytest.approx([-0.1, -0.2, -0.3])
    assert stored["rm_scores"].tolist() == [0.0, 0.0, 1.0]  # the reward on the last response token


def test_verl_grpo_gives_each_rollouts_calls_tethers_per_rollout_advantage(verl_advantages: Advantages) -> None:
    keys, fields, by_rollout, rollouts, rows = _batch()
    data = verl_advantages(keys, fields, n=4)
    tether = _group_reference(rollouts)
    for uid, members in GROUPS.items():
        n = len(members)
        for name, *_ in members:
            if tether[name] == 0.0:
                continue
            # verl divides by the unbiased std of the group, tether's GRPO by the population std
            expected = tether[name] * math.sqrt((n - 1) / n)
            session_rows = [i for i, r in enumerate(rows) if r.extra_fields["tether"]["rollout_id"] == name]
            assert len(session_rows) == len(by_rollout[name])
            for i in session_rows:
                advantages = data.batch["advantages"][i]
                mask = data.batch["response_mask"][i]
                trained = bool(mask.any())
                assert trained == rows[i].extra_fields["tether"]["trainable"]
                got = advantages[mask.bool()]
                assert torch.all(advantages[~mask.bool()] == 0)
                if trained:
                    assert got.tolist() == pytest.approx([expected] * len(got), rel=1e-4), (uid, name)
    # every trained call of a rollout with a non-zero advantage is trained: no signal lost
    assert sum(bool((data.batch["advantages"][i] != 0).any()) for i in range(len(rows))) == sum(
        1 for r in rows if r.extra_fields["tether"]["trainable"] and tether[r.extra_fields["tether"]["rollout_id"]]
    )


def test_an_untrained_last_row_would_zero_the_rollout_in_verl(verl_advantages: Advantages) -> None:
    """Why the rows are ordered: verl reads a session's advantage at the first unmasked token of its last
    row, so a rollout whose last call belongs to an untrained sub-agent would train on 0."""
    keys, fields, _, _, rows = _batch()
    ours = verl_advantages(keys, fields, n=4)
    a0 = [i for i, r in enumerate(rows) if r.extra_fields["tether"]["rollout_id"] == "a0"]
    assert rows[a0[-1]].extra_fields["tether"]["trainable"]
    assert bool((ours.batch["advantages"][a0[-1]] != 0).any())

    naive = list(fields)
    naive[a0[0]], naive[a0[-1]] = naive[a0[-1]], naive[a0[0]]  # the checker's row last
    data = verl_advantages(keys, naive, n=4)
    assert all(not bool((data.batch["advantages"][i] != 0).any()) for i in a0)


def test_a_rollout_without_reward_gives_no_row_and_stays_out_of_its_group() -> None:
    _, transitions = _rollout("x", 0.0, 2)
    assert rollout_rows(transitions, reward=None, uid="u") == []
    assert rollout_rows([], reward=1.0, uid="u") == []


def test_a_call_without_token_ids_is_refused_with_the_fix() -> None:
    _, transitions = _rollout("x", 1.0, 1)
    transitions[0].response_token_ids = []
    with pytest.raises(ValueError, match="return_token_ids"):
        rollout_rows(transitions, reward=1.0, uid="u")


def test_rows_are_cut_to_verls_lengths_and_logprobs_are_all_or_none() -> None:
    _, transitions = _rollout("x", 1.0, 2)
    rows = rollout_rows(transitions, reward=1.0, uid="u", prompt_length=2, response_length=2)
    assert rows[0].prompt_ids == [8, 9] and rows[0].response_ids == [20, 21]
    assert rows[0].response_logprobs == pytest.approx([-0.1, -0.2]) and rows[0].response_mask == [1, 1]
    transitions[1].logprobs = None
    assert all(r.response_logprobs is None for r in rollout_rows(transitions, reward=1.0, uid="u"))
