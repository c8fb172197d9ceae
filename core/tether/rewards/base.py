"""The contract of a group reward: what it is given (a task's ``Group`` of finished rollouts) and what it
gives back (a ``Verdict``: one ``Score`` per rollout, with the metrics and notes of its work)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.types import Span

#: a group reward's metrics per batch are summed, except these kinds of key (averaged over the batch's groups)
MEAN_SUFFIX = "/mean"


class GroupRewardError(RuntimeError):
    """A group reward could not score a group (a judge that gave no valid scores, an ``extract=`` that raised):
    the group's rollouts fail with it and ``fit`` stops with a ``FitError`` in its words. Never a silent 0."""


@dataclass(frozen=True, slots=True)
class Member:
    """One finished rollout of a group: its output and the spans its attempt captured (in sequence order)."""

    rollout_id: str
    output: Any
    spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    """The rollouts of one task in one batch, scored together. ``cache_dir``: the run folder, where a reward
    may keep what it paid for (None in ``dev``: nothing is kept beyond the process)."""

    task: Any
    members: tuple[Member, ...]
    cache_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class Score:
    """A rollout's score in [0, 1] from a group reward, a one-line reason, and what its reward span records
    besides (``details``: the judge's model, tokens, prompt version, ...)."""

    value: float
    reason: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Verdict:
    """A group's scores (one per member, in the members' order) and the metrics of scoring it (summed over a
    batch, or averaged for keys ending in ``MEAN_SUFFIX``)."""

    scores: list[Score]
    metrics: dict[str, float] = field(default_factory=dict)


class GroupReward(abc.ABC):
    """A reward that scores a task's group together (``reward=`` takes one like a function). ``name`` is the
    name of the reward span it records on each rollout."""

    name: str = "group_reward"

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open what scoring needs (a judge's model backend). Called before the first group; idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what ``start`` opened; the next ``start`` opens it again. Idempotent."""

    async def problem(self) -> str | None:
        """What would stop it scoring (an unreachable judge), in words naming the fix; None when nothing does.
        ``dev`` reports it and ``fit`` stops on it before anything trains."""
        return None

    @abc.abstractmethod
    async def score_group(self, group: Group) -> Verdict:
        """Score every member of ``group``; ``GroupRewardError`` when it cannot."""

    def notes(self, metrics: Mapping[str, float]) -> list[str]:
        """What a batch's metrics of this reward (summed as ``Verdict`` says) tell the user to change; none by
        default."""
        del metrics
        return []


def merge_metrics(verdicts: Sequence[Verdict]) -> dict[str, float]:
    """A batch's metrics from its groups' verdicts: sums, and means for keys ending in ``MEAN_SUFFIX``."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for verdict in verdicts:
        for key, value in verdict.metrics.items():
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {
        key.removesuffix(MEAN_SUFFIX): (value / counts[key] if key.endswith(MEAN_SUFFIX) else value)
        for key, value in sums.items()
    }
