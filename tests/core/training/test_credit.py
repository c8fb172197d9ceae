"""Credit rules on hand-built spans: per-sub-agent rewards, per-call returns, step groups and their fallback,
gamma, tool error penalties, and the notes a rule that cannot apply leaves."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from tether import spans
from tether.algorithms import credit_advantages
from tether.policies import PolicyMap
from tether.training.signal.batch import RolloutResult
from tether.training.signal.credit import CreditRule, check_credit
from tether.training.signal.transitions import build_transitions
from tether.types import Rollout, RolloutStatus, Span, SpanKind, check_rewards


def _call(agent: str | None, policy: str | None = None) -> Span:
    """The proxy's span of one call (sequence numbers are given by ``_result``)."""
    attributes: dict[str, Any] = {
        "call_id": "c",
        "request": {"messages": [{"role": "user", "content": "q"}], "tools": None, "params": {}},
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {"message": {"role": "assistant", "content": "a"}, "response_token_ids": [4], "logprobs": [-1]}
        ],
    }
    if policy is not None:
        attributes[spans.POLICY] = policy
    return Span(
        rollout_id="",
        attempt_id="",
        kind=SpanKind.LLM,
        name=spans.LLM_CALL,
        agent_name=agent,
        attributes=attributes,
    )


def _reward(value: float, target: str | None = None, final: bool = False) -> Span:
    extra: dict[str, Any] = {} if target is None else {spans.REWARD_TARGET: target}
    if final:
        extra[spans.REWARD_FINAL] = True
    return Span(
        rollout_id="",
        attempt_id="",
        kind=SpanKind.REWARD,
        name=spans.REWARD,
        attributes=spans.reward_attributes(value, **extra),
    )


def _tool(error: str | None = None) -> Span:
    attributes = spans.tool_attributes("div", {"a": 1}, error=error, result=None if error else 1)
    return Span(rollout_id="", attempt_id="", kind=SpanKind.TOOL, name="div", attributes=attributes)


def _result(
    rid: str,
    task: str,
    reward: float | None,
    events: list[Span],
    *,
    policies: PolicyMap | None = None,
) -> RolloutResult:
    rollout = Rollout(rollout_id=rid, input="x", task_id=task, status=RolloutStatus.SUCCEEDED, reward=reward)
    for i, span in enumerate(events):
        span.rollout_id, span.attempt_id, span.sequence = rid, f"{rid}-a", i
    built = build_transitions(rollout, events, policies=policies)
    return RolloutResult(
        rollout,
        events,
        1,
        built.transitions,
        built.problems,
        built.agent_names,
        built.target_rewards,
        built.emitted_rewards,
        built.tool_spans,
    )


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


def _advantages(result: RolloutResult) -> list[float | None]:
    return [t.advantage for t in result.transitions]


def test_episode_is_bit_identical_to_the_per_rollout_group_advantage_without_per_agent_rewards() -> None:
    rng = random.Random(3)
    results = []
    for i in range(24):
        reward = None if i % 11 == 5 else rng.random()
        calls = [_call(rng.choice(["a", "b"])) for _ in range(rng.randint(0, 3))]
        results.append(_result(f"r{i}", f"task{i % 4}", reward, calls))
    for scale in (True, False):
        trained, stats = credit_advantages(results, scale_by_std=scale)
        rollouts = [r.rollout for r in results]
        expected = _group_reference(rollouts, scale_by_std=scale)
        for r in results:
            assert _advantages(r) == [expected.get(r.rollout.rollout_id)] * len(r.transitions)
        rewarded = [r for r in rollouts if r.reward is not None]
        by_task = {r.task_id for r in rewarded}
        flat = {t for t in by_task if len({r.reward for r in rewarded if r.task_id == t}) == 1}
        assert (stats.groups, stats.flat_groups, stats.rollouts) == (len(by_task), len(flat), len(rewarded))
        assert trained == [t for r in results for t in r.transitions if t.advantage]


def test_a_reward_mapping_gives_each_sub_agents_calls_its_own_advantage() -> None:
    def rollout(rid: str, writer: float, checker: float) -> RolloutResult:
        events = [_call("write_query"), _call("check_query"), _reward(writer, "write_query", final=True)]
        events.append(_reward(checker, "check_query", final=True))
        return _result(rid, "t", (writer + checker) / 2, events)

    good_writer, good_checker = rollout("r1", 1.0, 0.0), rollout("r2", 0.0, 1.0)
    assert good_writer.target_rewards == {"write_query": 1.0, "check_query": 0.0}
    assert [t.target for t in good_writer.transitions] == ["write_query", "check_query"]
    _, stats = credit_advantages([good_writer, good_checker], scale_by_std=False)
    # the rollouts' own rewards are equal (0.5): without the mapping nothing would be learnt
    assert _advantages(good_writer) == [0.5, -0.5]
    assert _advantages(good_checker) == [-0.5, 0.5]
    assert stats.groups == 2 and stats.flat_groups == 0


def test_a_mapping_keyed_by_policy_reaches_the_policys_sub_agents() -> None:
    policies = PolicyMap.from_optimize({"writer": ["write_query", "rewrite_query"], "checker": ["check_query"]})

    def rollout(rid: str, writer: float) -> RolloutResult:
        events = [
            _call("write_query"),
            _call("rewrite_query"),
            _call("check_query"),
            _reward(writer, "writer", True),
        ]
        return _result(rid, "t", 0.25, events, policies=policies)

    a, b = rollout("r1", 1.0), rollout("r2", 0.0)
    assert [t.target for t in a.transitions] == ["writer", "writer", None]
    credit_advantages([a, b], scale_by_std=False)
    assert _advantages(a) == [0.5, 0.5, 0.0] and _advantages(b) == [-0.5, -0.5, 0.0]


def test_per_call_emitted_reward_decides_which_calls_gain() -> None:
    rewarded = _result("r1", "t", 1.0, [_call("a"), _reward(1.0), _call("a")])
    plain = _result("r2", "t", 1.0, [_call("a"), _call("a")])
    episode = [_result(r.rollout.rollout_id, "t", 1.0, r.spans) for r in (rewarded, plain)]
    trained, _ = credit_advantages(episode)
    assert trained == []  # episode: equal rollout rewards, no signal
    trained, stats = credit_advantages([rewarded, plain], credit="per_call", scale_by_std=False)
    assert [t.reward for t in rewarded.transitions] == [2.0, 1.0]
    assert _advantages(rewarded) == [0.5, 0.0] and _advantages(plain) == [-0.5, 0.0]
    assert [t.advantage for t in trained] == [0.5, -0.5]
    assert (stats.step_groups, stats.flat_groups, stats.fallbacks, stats.notes) == (2, 1, 0, [])


def test_transitions_hold_facts_and_the_rule_alone_sets_values_and_advantages() -> None:
    events = [[_call("a"), _reward(1.0), _tool("E"), _call("a")], [_call("a"), _call("a"), _reward(0.5)]]
    results = [_result(f"r{i}", "t", float(i), e) for i, e in enumerate(events)]
    first = results[0].transitions
    assert [(t.step_reward, t.failed_tools, t.target_reward) for t in first] == [(1.0, 1, 0.0), (0.0, 0, 0.0)]
    assert [(t.reward, t.advantage) for t in first] == [(0.0, None), (0.0, None)]  # (nothing credited yet)
    credit_advantages(results, credit="per_call", gamma=0.5, tool_error_penalty=0.25)
    assert [t.reward for t in first] == [1.0 - 0.25 + 0.0, 0.0]
    episode = [_result(f"r{i}", "t", float(i), e) for i, e in enumerate(events)]
    credit_advantages(episode, credit="episode", tool_error_penalty=0.25)
    assert [t.reward for t in episode[0].transitions] == [-0.25, 0.0]


def test_a_reward_for_a_sub_agent_goes_to_its_latest_call_before_it() -> None:
    events = [_call("writer"), _call("checker"), _call("writer"), _reward(1.0, "checker"), _reward(0.5)]
    result = _result("r1", "t", 0.0, events)
    assert [t.step_reward for t in result.transitions] == [0.0, 1.0, 0.5]
    early = _result("r2", "t", 0.0, [_reward(1.0, "checker"), _call("checker")])
    assert early.transitions[0].step_reward == 0.0  # (no checker call before it: no call earns it)


def test_a_step_group_of_one_falls_back_to_the_tasks_calls_of_that_sub_agent() -> None:
    long = _result("r1", "t", 1.0, [_call("a"), _call("a"), _call("a"), _reward(3.0)])
    short = _result("r2", "t", 0.0, [_call("a"), _call("a")])
    _, stats = credit_advantages([long, short], credit="per_call", scale_by_std=False)
    assert stats.step_groups == 2 and stats.fallbacks == 1
    # the third call is alone at its position: against the mean of every 'a' call of the task (1, 1, 4, 0, 0)
    assert long.transitions[2].reward == 4.0
    assert long.transitions[2].advantage == pytest.approx(4.0 - 6.0 / 5)
    assert _advantages(long)[:2] == [0.5, 0.5] and _advantages(short) == [-0.5, -0.5]


def test_step_groups_keep_sub_agents_apart() -> None:
    a = _result("r1", "t", 1.0, [_call("writer"), _call("checker")])
    b = _result("r2", "t", 0.0, [_call("checker"), _call("writer")])
    _, stats = credit_advantages([a, b], credit="per_call", scale_by_std=False)
    assert stats.step_groups == 2 and stats.fallbacks == 0
    assert _advantages(a) == [0.5, 0.5] and _advantages(b) == [-0.5, -0.5]


def test_gamma_discounts_the_final_reward_of_earlier_calls() -> None:
    def pair() -> list[RolloutResult]:
        events = [[_call("a"), _call("a"), _call("a")] for _ in range(2)]
        return [
            _result(f"r{i}", "t", reward, calls)
            for i, (reward, calls) in enumerate(zip((1.0, 0.0), events, strict=True))
        ]

    full, discounted = pair(), pair()
    credit_advantages(full, credit="per_call", scale_by_std=False)
    credit_advantages(discounted, credit="per_call", scale_by_std=False, gamma=0.5)
    assert [t.reward for t in discounted[0].transitions] == [0.25, 0.5, 1.0]
    assert _advantages(full[0]) == [0.5, 0.5, 0.5]
    assert _advantages(discounted[0]) == [0.125, 0.25, 0.5]
    assert _advantages(discounted[1]) == [-0.125, -0.25, -0.5]


@pytest.mark.parametrize("credit", ["episode", "per_call"])
def test_tool_error_penalty_lowers_exactly_the_call_that_requested_the_failed_tool(credit: CreditRule) -> None:
    failed = _result(
        "r1",
        "t",
        1.0,
        [_call("a"), _tool("ZeroDivisionError"), _call("a"), _tool()],
    )
    clean = _result("r2", "t", 0.0, [_call("a"), _tool(), _call("a"), _tool()])
    assert [t.failed_tools for t in failed.transitions] == [1, 0]
    credit_advantages([failed, clean], credit=credit, scale_by_std=False, tool_error_penalty=0.5)
    without = [_result(r.rollout.rollout_id, "t", r.rollout.reward, r.spans) for r in (failed, clean)]
    credit_advantages(without, credit=credit, scale_by_std=False)
    assert failed.transitions[0].advantage is not None and without[0].transitions[0].advantage is not None
    assert failed.transitions[0].advantage < without[0].transitions[0].advantage
    assert _advantages(failed)[1] == _advantages(without[0])[1]


def test_rules_that_cannot_apply_say_so() -> None:
    plain = [_result(f"r{i}", "t", float(i), [_call("a")]) for i in range(2)]
    _, stats = credit_advantages(plain, credit="per_call", tool_error_penalty=0.5)
    assert len(stats.notes) == 2
    assert "credit='per_call' found no emitted rewards" in stats.notes[0] and "equals 'episode'" in stats.notes[0]
    assert "tool_error_penalty=0.5 found no tool spans" in stats.notes[1]
    emitted = [_result("r1", "t", 1.0, [_call("a"), _reward(1.0), _tool()])]
    assert credit_advantages(emitted, credit="per_call", tool_error_penalty=0.5)[1].notes == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({}, "empty mapping"),
        ({"": 1.0}, "non-empty strings"),
        ({3: 1.0}, "non-empty strings"),
        ({"checker": float("nan")}, "'checker'.*finite number"),
        ({"checker": "1"}, "'checker'.*finite number"),
        ("1", "finite number"),
    ],
)
def test_bad_reward_mappings_are_refused_with_what_is_wrong(value: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_rewards(value)


def test_a_good_reward_mapping_is_kept_as_floats() -> None:
    assert check_rewards({"writer": 1, "checker": 0.5}) == {"writer": 1.0, "checker": 0.5}


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"credit": "sum"}, "credit must be"),
        ({"gamma": 1.5, "credit": "per_call"}, r"gamma must be a number in \[0, 1\]"),
        ({"gamma": float("nan"), "credit": "per_call"}, "gamma must be"),
        ({"gamma": 0.9}, "set credit='per_call'"),
        ({"tool_error_penalty": -1.0}, "tool_error_penalty must be"),
    ],
)
def test_bad_credit_settings_are_refused(kwargs: dict[str, Any], why: str) -> None:
    settings = {"credit": "episode", "tool_error_penalty": 0.0, "gamma": 1.0, **kwargs}
    with pytest.raises(ValueError, match=why):
        check_credit(settings["credit"], settings["tool_error_penalty"], settings["gamma"])


def test_a_rewards_target_goes_out_with_the_otel_export() -> None:
    from tether.otel.genai import REWARD_FINAL, REWARD_TARGET, attempt_spans
    from tether.types import Attempt

    result = _result("r1", "t", 0.5, [_call("a"), _reward(0.5, "checker"), _reward(1.0, "writer", final=True)])
    attempt = Attempt(attempt_id="r1-a", rollout_id="r1", index=1, worker_id="w")
    rewards = [
        s.attributes for s in attempt_spans(result.rollout, attempt, result.spans) if REWARD_TARGET in s.attributes
    ]
    assert [(a[REWARD_TARGET], a.get(REWARD_FINAL)) for a in rewards] == [("checker", None), ("writer", True)]
