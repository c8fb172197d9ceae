"""``wrap(optimize=...)`` as a policy map: which policy serves each sub-agent, which calls train."""

from __future__ import annotations

import pytest

import tether
from tether.policies import DEFAULT_POLICY, FROZEN_POLICY, PolicyMap


def _agent(task: str) -> str:
    return task


def test_none_and_list_keep_one_shared_policy() -> None:
    everything = PolicyMap.from_optimize(None)
    assert everything.names == [DEFAULT_POLICY] and everything.agents is None
    assert everything.policy_of("anyone") == DEFAULT_POLICY and everything.trains("anyone")
    listed = PolicyMap.from_optimize(["write", "rewrite"])
    assert listed.agents == {"write", "rewrite"}
    # a sub-agent left out is still served by the shared policy, but its calls do not train
    assert listed.policy_of("check") == DEFAULT_POLICY and not listed.trains("check")
    assert listed.trains("write") and not listed.trains(None)


def test_mapping_gives_each_policy_its_agents_and_freezes_the_rest() -> None:
    policies = PolicyMap.from_optimize({"writer": ["write", "rewrite"], "checker": "check"})
    assert policies.names == ["writer", "checker"] and not policies.shared
    assert policies.policy_of("rewrite") == "writer" and policies.policy_of("check") == "checker"
    assert policies.policy_of("summarize") == FROZEN_POLICY and not policies.trains("summarize")
    assert policies.policy_of(None) == FROZEN_POLICY
    assert policies.agents == {"write", "rewrite", "check"}


@pytest.mark.parametrize(
    ("optimize", "message"),
    [
        (
            {"writer": ["write"], "checker": ["write"]},
            "sub-agent 'write' is in two policies, 'writer' and 'checker'",
        ),
        ({"frozen": ["write"]}, "a policy cannot be named 'frozen'"),
        ({}, "empty mapping"),
        ({"writer": []}, "optimize['writer'] takes sub-agent names"),
        ({"": ["write"]}, "policy names must be non-empty strings"),
        ([], "optimize= takes sub-agent names"),
    ],
)
def test_bad_optimize_is_refused_with_the_reason(optimize: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tether.wrap(_agent, optimize=optimize, adapter="openai")  # type: ignore[arg-type]


def test_wrap_keeps_the_union_of_trained_agents_in_optimize() -> None:
    wrapped = tether.wrap(_agent, optimize={"writer": ["write"], "checker": ["check"]}, adapter="openai")
    assert wrapped.optimize == {"write", "check"}
    assert wrapped.policies.policy_of("check") == "checker"
    assert wrapped.is_trainable("write") and not wrapped.is_trainable("other")
