"""Credit: the rule that turns a batch's recorded facts into each call's value and advantage, in one place.

``Credit`` is the rule (``Trainer(credit=..., tool_error_penalty=..., gamma=...)`` and the algorithm's
``scale_by_std``), validated once when it is made; it is written into every rollout's metadata
(``spans.CREDIT_METADATA``, with the policy map under ``spans.POLICIES_METADATA``) so the dashboard applies the
rule training applied. ``tether.training.signal.transitions`` records only facts (step rewards, failed tools,
targets, ``trainable``, policy); ``assign_credit`` is the one function that sets every call's ``reward`` (its
value, ``call_value``) and ``advantage``.

A call's value: under ``"episode"`` its target reward ``R`` (its sub-agent's final reward, else its policy's,
else the rollout's) minus its tool penalties; under ``"per_call"`` its return ``G_t = r_t + gamma**(T-1-t) * R``
(``r_t``: the rewards emitted for it, minus its tool penalties). Values are made group-relative:

- ``"episode"``: against the rollouts of the same task, each counted once by its target reward for the call's
  target (a rollout whose mapping lacks it counts its own reward). With no reward mapping and no penalty
  this is the per-rollout group advantage: every call gets its rollout's advantage.
- ``"per_call"``: within the call's *step group*: the calls of the same task, the same sub-agent and the same
  position (the k-th call of that sub-agent) across the task's rollouts, after GiGPO's anchor states
  (arXiv 2505.10978). A step group with one member falls back to every call of that task and sub-agent.

A value minus its group's mean is divided by the group's standard deviation when ``scale_by_std``. A group
whose values are all equal carries no signal: its advantages are zero and it is counted. Calls of rollouts
without a reward get no advantage. ``CreditStats.notes`` says when a rule cannot apply to a batch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether.types import Rollout, Transition

CreditRule = Literal["episode", "per_call"]


@dataclass(frozen=True, slots=True)
class Credit:
    """A credit rule with its settings, checked when made (``ValueError`` naming the fix)."""

    rule: CreditRule = "episode"
    tool_error_penalty: float = 0.0
    gamma: float = 1.0
    scale_by_std: bool = True

    def __post_init__(self) -> None:
        check_credit(self.rule, self.tool_error_penalty, self.gamma)

    def to_metadata(self) -> dict[str, Any]:
        """What a rollout's metadata records (``spans.CREDIT_METADATA``)."""
        return {
            "rule": self.rule,
            "tool_error_penalty": self.tool_error_penalty,
            "gamma": self.gamma,
            "scale_by_std": self.scale_by_std,
        }

    @classmethod
    def from_metadata(cls, value: Any) -> Credit | None:
        """The rule a rollout's metadata recorded; None when it recorded none (or one this version cannot read)."""
        if not isinstance(value, Mapping):
            return None
        try:
            return cls(
                value.get("rule", "episode"),
                value.get("tool_error_penalty", 0.0),
                value.get("gamma", 1.0),
                bool(value.get("scale_by_std", True)),
            )
        except ValueError:
            return None


def check_credit(credit: Any, tool_error_penalty: Any, gamma: Any) -> None:
    """``ValueError`` naming the fix for a bad ``credit=``, ``tool_error_penalty=`` or ``gamma=``."""
    if credit not in ("episode", "per_call"):
        raise ValueError(f"credit must be 'episode' or 'per_call', got {credit!r}")
    if not _finite(tool_error_penalty) or tool_error_penalty < 0:
        raise ValueError(f"tool_error_penalty must be a finite number >= 0, got {tool_error_penalty!r}")
    if not _finite(gamma) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    if gamma != 1.0 and credit != "per_call":
        raise ValueError(
            f"gamma={gamma!r} discounts per-call returns: set credit='per_call', or leave gamma at 1.0 for "
            "'episode'"
        )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def call_value(t: Transition, calls: int, credit: Credit) -> float:
    """A call's value under ``credit``: ``R - p * failed`` (``"episode"``) or its return ``G_t = r_t - p * failed
    + gamma**(T-1-t) * R`` (``"per_call"``), with ``R`` its target reward (0 when none), ``r_t`` the rewards
    emitted for it, ``T`` the calls of its attempt and ``p`` the ``tool_error_penalty``."""
    final = t.target_reward if t.target_reward is not None else 0.0
    own = -credit.tool_error_penalty * t.failed_tools
    if credit.rule == "per_call":
        return t.step_reward + own + credit.gamma ** (calls - 1 - t.step) * final
    return own + final


class Scored(Protocol):
    """A finished rollout with its transitions and what its spans held
    (``tether.training.signal.batch.RolloutResult``)."""

    @property
    def rollout(self) -> Rollout: ...

    @property
    def transitions(self) -> list[Transition]: ...

    @property
    def target_rewards(self) -> dict[str, float]: ...

    @property
    def emitted_rewards(self) -> int: ...

    @property
    def tool_spans(self) -> int: ...


@dataclass(slots=True)
class CreditStats:
    """What one batch's credit assignment did, for the training log."""

    groups: int = 0  # groups values were normalised in (step groups and fallbacks count one each)
    flat_groups: int = 0  # of which every value was equal: no gradient
    step_groups: int = 0  # per_call: step groups of two or more calls
    fallbacks: int = 0  # per_call: calls alone in their step group, normalised in their task's group
    rollouts: int = 0
    notes: list[str] = field(default_factory=list)  # rules that could not apply to this batch

    def metrics(self) -> dict[str, int]:
        return {
            "groups": self.groups,
            "flat_groups": self.flat_groups,
            "step_groups": self.step_groups,
            "step_fallbacks": self.fallbacks,
        }


def assign_credit(
    results: Iterable[Scored], credit: Credit, *, eps: float = 1e-6
) -> tuple[list[Transition], CreditStats]:
    """Set every transition's ``reward`` (its value) and ``advantage`` under ``credit``: the one place either is
    set. Returns the trainable transitions with a non-zero advantage (what the policy update trains on) and
    the stats."""
    items = list(results)
    stats = CreditStats(notes=_notes(items, credit.rule, credit.tool_error_penalty))
    tasks: dict[str, list[Scored]] = defaultdict(list)
    for item in items:
        for t in item.transitions:
            t.advantage = None
            t.reward = call_value(t, len(item.transitions), credit)
        if item.rollout.reward is not None:
            tasks[item.rollout.task_id].append(item)
    norm = _Normaliser(stats, credit.scale_by_std, eps)
    for members in tasks.values():
        stats.rollouts += len(members)
        if credit.rule == "episode":
            _episode(members, norm)
        else:
            _per_call(members, norm, stats)
    trained = [t for item in items for t in item.transitions if t.trainable and t.advantage]
    return trained, stats


def credit_advantages(
    results: Iterable[Scored],
    *,
    credit: CreditRule = "episode",
    scale_by_std: bool = True,
    tool_error_penalty: float = 0.0,
    gamma: float = 1.0,
    eps: float = 1e-6,
) -> tuple[list[Transition], CreditStats]:
    """``assign_credit`` with the rule given by its parts."""
    return assign_credit(results, Credit(credit, tool_error_penalty, gamma, scale_by_std), eps=eps)


@dataclass(slots=True)
class _Normaliser:
    stats: CreditStats
    scale_by_std: bool
    eps: float

    def baseline(self, values: Sequence[float]) -> tuple[float, float] | None:
        """The group's mean and divisor, or None for a flat group (counted)."""
        self.stats.groups += 1
        mean = sum(values) / len(values)
        std = math.sqrt(sum((x - mean) ** 2 for x in values) / len(values))
        if std < self.eps:
            self.stats.flat_groups += 1
            return None
        return mean, (std + self.eps if self.scale_by_std else 1.0)

    @staticmethod
    def apply(calls: Iterable[Transition], base: tuple[float, float] | None) -> None:
        for t in calls:
            t.advantage = 0.0 if base is None else (t.reward - base[0]) / base[1]


def _episode(members: list[Scored], norm: _Normaliser) -> None:
    """Each target's calls against the task's rollouts, each rollout counted once by its value for it."""
    by_target: dict[str | None, list[Transition]] = defaultdict(list)
    for item in members:
        for t in item.transitions:
            by_target[t.target].append(t)
    for target, calls in (by_target or {None: []}).items():
        values = [_target_value(item, target) for item in members]
        norm.apply(calls, norm.baseline(values))


def _target_value(item: Scored, target: str | None) -> float:
    reward = float(item.rollout.reward or 0.0)
    return item.target_rewards.get(target, reward) if target is not None else reward


def _per_call(members: list[Scored], norm: _Normaliser, stats: CreditStats) -> None:
    """Returns within step groups (task, sub-agent, position), alone ones within their task and sub-agent."""
    steps: dict[tuple[str | None, int], list[Transition]] = defaultdict(list)
    for item in members:
        seen: dict[str | None, int] = defaultdict(int)
        for t in item.transitions:
            steps[(t.agent_name, seen[t.agent_name])].append(t)
            seen[t.agent_name] += 1
    alone: dict[str | None, list[Transition]] = defaultdict(list)
    for (agent, _), calls in steps.items():
        if len(calls) == 1:
            alone[agent].extend(calls)
            continue
        stats.step_groups += 1
        norm.apply(calls, norm.baseline([t.reward for t in calls]))
    for agent, calls in alone.items():
        stats.fallbacks += len(calls)
        every = [t for item in members for t in item.transitions if t.agent_name == agent]
        norm.apply(calls, norm.baseline([t.reward for t in every]))


def _notes(items: list[Scored], credit: CreditRule, tool_error_penalty: float) -> list[str]:
    notes = []
    if credit == "per_call" and items and not any(item.emitted_rewards for item in items):
        notes.append(
            "credit='per_call' found no emitted rewards in this batch (tether.emit_reward inside the agent): each "
            "call's return is its final reward alone, so per_call equals 'episode' apart from its step groups"
        )
    if tool_error_penalty and items and not any(item.tool_spans for item in items):
        notes.append(
            f"tool_error_penalty={tool_error_penalty:g} found no tool spans in this batch, so no call was "
            "penalised: the framework's plugin records tool calls (or call tether.emit_span for them)"
        )
    return notes
