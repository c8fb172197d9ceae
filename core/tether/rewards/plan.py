"""``reward=`` in its every form, read once into a ``RewardPlan``: which parts score each rollout alone (the
user's functions), which score a task's group together (``GroupReward``: ``tether.Judge``,
``tether.MajorityVote``), and how their values combine.

The forms (a plain function needs no plan: the runner scores it as it always did):

- a group reward alone: ``reward=tether.Judge(...)``: its score is the rollout's reward;
- a weighted list: ``reward=[(0.7, tether.Judge(...)), (0.3, fn)]``: the weighted sum of the parts (a function
  there returns a number);
- a mapping per sub-agent or policy: ``reward={"writer": tether.Judge(...), "planner": fn}`` (each value a
  part or a weighted list): each target's calls are credited with its own value and the rollout's reward is the
  mean of the values, exactly as for a ``reward=`` function that returns a mapping.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.rewards.base import GroupReward, Score
from tether.types import check_reward

Part = Callable[[Any, Any], Any] | GroupReward

_FORMS = (
    "a function (task, output) -> number, tether.Judge(...) or tether.MajorityVote(...), a weighted list "
    "[(0.7, tether.Judge(...)), (0.3, fn)], or {sub-agent or policy: one of those}"
)


@dataclass(frozen=True, slots=True)
class Term:
    """One part of the plan: its target (a sub-agent or policy; None: the rollout's reward), weight and part."""

    target: str | None
    weight: float
    part: Part

    @property
    def is_group(self) -> bool:
        return isinstance(self.part, GroupReward)


class RewardPlan:
    """The parts of a ``reward=`` that is not a plain function (see the module docstring)."""

    def __init__(self, terms: list[Term]) -> None:
        self.terms = terms
        self.mapped = any(t.target is not None for t in terms)

    @classmethod
    def of(cls, reward: Any) -> RewardPlan | None:
        """The plan of ``reward``; None for a plain function or None (``TypeError`` / ``ValueError`` naming the
        forms for anything else)."""
        if reward is None or (callable(reward) and not isinstance(reward, GroupReward)):
            return None
        if isinstance(reward, Mapping):
            if not reward:
                raise ValueError(f"reward= is an empty mapping: give {_FORMS}")
            terms: list[Term] = []
            for target, value in reward.items():
                if not isinstance(target, str) or not target.strip():
                    raise TypeError(f"reward= mapping keys are sub-agent or policy names, got {target!r}")
                terms.extend(_terms(value, target))
            return cls(terms)
        return cls(_terms(reward, None))

    @property
    def group_parts(self) -> list[GroupReward]:
        """The group rewards of the plan, each once, in order."""
        out: list[GroupReward] = []
        for term in self.terms:
            if isinstance(term.part, GroupReward) and all(term.part is not p for p in out):
                out.append(term.part)
        return out

    async def score_functions(self, task: Any, output: Any) -> dict[int, float]:
        """Each function term's value (by term index); an error names the function that raised or returned
        something that is not a number."""
        values: dict[int, float] = {}
        for index, term in enumerate(self.terms):
            if isinstance(term.part, GroupReward):
                continue
            value = term.part(task, output)
            if inspect.isawaitable(value):
                value = await value
            values[index] = check_reward(value)
        return values

    def combine(self, values: Mapping[int, float], scores: Mapping[int, Score]) -> float | dict[str, float]:
        """The reward: a number, or ``{target: number}`` for a mapping, from the function values and the group
        rewards' scores (both by term index)."""
        totals: dict[str | None, float] = {}
        for index, term in enumerate(self.terms):
            value = scores[index].value if term.is_group else values[index]
            totals[term.target] = totals.get(term.target, 0.0) + term.weight * value
        if not self.mapped:
            return totals[None]
        return {str(target): value for target, value in totals.items()}


def _terms(value: Any, target: str | None) -> list[Term]:
    if isinstance(value, GroupReward) or callable(value):
        return [Term(target, 1.0, value)]
    if isinstance(value, list | tuple) and value:
        terms = []
        for item in value:
            if not (isinstance(item, tuple | list) and len(item) == 2):
                raise TypeError(f"a weighted reward= list holds (weight, reward) pairs, got {item!r}: {_FORMS}")
            weight, part = item
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
                raise ValueError(f"a reward= weight must be a finite number, got {weight!r}")
            if not (isinstance(part, GroupReward) or callable(part)):
                raise TypeError(f"reward= weight {weight!r} is paired with {type(part).__name__}: give {_FORMS}")
            terms.append(Term(target, float(weight), part))
        return terms
    where = f" for {target!r}" if target is not None else ""
    raise TypeError(f"reward{where} must be {_FORMS}; got {type(value).__name__}")
