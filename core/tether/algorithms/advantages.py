"""Group-relative advantages (GRPO), computed per rollout and then given to that rollout's transitions.

Rollouts of the same task form a group; a rollout's advantage is its reward minus the group mean, divided
by the group's standard deviation (optional). Computing it per rollout — not per transition — means a
rollout with many LLM calls does not weigh more in the baseline, and transitions of different tasks (with
different prompts) are never mixed into one group. A group whose rewards are all equal carries no signal:
its advantages are zero and it is counted.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.types import Rollout, Transition


@dataclass(slots=True)
class AdvantageStats:
    groups: int = 0
    flat_groups: int = 0  # every rollout of the task got the same reward: no gradient
    rollouts: int = 0
    per_rollout: dict[str, float] = field(default_factory=dict)


def group_advantages(
    rollouts: Iterable[Rollout], *, scale_by_std: bool = True, eps: float = 1e-6
) -> AdvantageStats:
    """Advantages of finished rollouts grouped by ``task_id``; rollouts without a reward are left out."""
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for rollout in rollouts:
        if rollout.reward is not None:
            groups[rollout.task_id].append(rollout)
    stats = AdvantageStats()
    for members in groups.values():
        stats.groups += 1
        stats.rollouts += len(members)
        rewards = [float(r.reward or 0.0) for r in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards))
        flat = std < eps
        stats.flat_groups += flat
        for rollout, reward in zip(members, rewards, strict=True):
            if flat:
                stats.per_rollout[rollout.rollout_id] = 0.0
            else:
                stats.per_rollout[rollout.rollout_id] = (reward - mean) / (std + eps if scale_by_std else 1.0)
    return stats


def assign(transitions: Iterable[Transition], stats: AdvantageStats) -> list[Transition]:
    """Give each transition its rollout's advantage; returns the trainable ones with a non-zero advantage."""
    out = []
    for t in transitions:
        t.advantage = stats.per_rollout.get(t.rollout_id)
        if t.trainable and t.advantage:
            out.append(t)
    return out
