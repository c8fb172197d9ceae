"""A finished rollout read back as training sees it (``Session.run_batch``): its last attempt's transitions
built, and a ``reward=`` mapping's targets that name no sub-agent or policy of the agent taken out of it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tether.store.base import Harvested
from tether.training.run.health import unknown_reward_targets, unknown_targets
from tether.training.signal.batch import RolloutResult
from tether.training.signal.transitions import build_transitions
from tether.types import Rollout

if TYPE_CHECKING:
    from tether.plugin.wrap import WrappedAgent


def rollout_result(item: Harvested, agent: WrappedAgent) -> RolloutResult:
    """``item``'s result: transitions built from its last attempt's spans; a reward for nobody trains nothing."""
    last = item.last_attempt_spans()
    built = build_transitions(item.rollout, last, policies=agent.policies)
    unknown = unknown_reward_targets(built.target_rewards, built.agent_names, agent.policies, agent.optimize)
    rollout = item.rollout
    if unknown:  # a reward for nobody: nothing of this rollout trains on it, and it is no part of its reward
        built.problems.insert(0, f"rollout {item.rollout.rollout_id}: {unknown}")
        built.transitions = []
        rollout = _without_targets(rollout, built.target_rewards, unknown_targets(
            built.target_rewards, built.agent_names, agent.policies, agent.optimize
        ))  # fmt: skip
    return RolloutResult(
        rollout,
        last,
        len(item.attempts),
        built.transitions,
        built.problems,
        built.agent_names,
        built.target_rewards,
        built.emitted_rewards,
        built.tool_spans,
    )


def _without_targets(rollout: Rollout, rewards: dict[str, float], unknown: list[str]) -> Rollout:
    """``rollout`` with its reward the mean of its ``reward=`` mapping's known targets only (None when it named
    no known one): the runner averaged every value, a sub-agent's that never ran included."""
    known = [value for target, value in rewards.items() if target not in unknown]
    return dataclasses.replace(rollout, reward=sum(known) / len(known) if known else None)
