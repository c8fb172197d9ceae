"""What a session's batch run returns (``Session.run_batch`` / ``run_jobs``): ``Batch``, the rollouts of one batch
(``RolloutResult`` each: the last attempt's spans and the transitions built from them) with their credit, and
``Job``, the tasks of one resources version in a batch of several."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.spans import proxy_call
from tether.training.signal.credit import CreditStats
from tether.types import Rollout, RolloutStatus, Span, Transition


@dataclass(slots=True)
class RolloutResult:
    """One finished rollout of a batch: its last attempt's spans and the transitions built from them."""

    rollout: Rollout
    spans: list[Span]
    attempts: int
    transitions: list[Transition]
    #: what building the transitions found wrong (no LLM call captured, no token ids, ...)
    problems: list[str]
    agent_names: set[str]
    #: the final reward of each sub-agent or policy a ``reward=`` mapping named (empty for a number)
    target_rewards: dict[str, float] = field(default_factory=dict)
    #: rewards emitted during the attempt, and its tool spans (what the credit rules' notes check)
    emitted_rewards: int = 0
    tool_spans: int = 0

    @property
    def succeeded(self) -> bool:
        return self.rollout.status == RolloutStatus.SUCCEEDED

    @property
    def used_tools(self) -> bool:
        """Whether the model asked for a tool call in this rollout."""
        return any(_has_tool_call(span) for span in self.spans)


@dataclass(slots=True)
class Batch:
    """The rollouts of one batch, in the order they were enqueued, and the seconds the batch took. The Session
    credits every batch once under the settings' rule (``tether.training.signal.credit.assign_credit``): each
    transition's ``reward`` (its value) and ``advantage`` are set, ``trained`` holds the trainable ones with a
    non-zero advantage (what a policy update trains on) and ``credit`` what the assignment did."""

    results: list[RolloutResult] = field(default_factory=list)
    seconds: float = 0.0
    trained: list[Transition] = field(default_factory=list)
    credit: CreditStats = field(default_factory=CreditStats)
    #: what the group rewards did for this batch (``judge/prompt_tokens``, ``majority/all_different``, ...)
    group_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def rollouts(self) -> list[Rollout]:
        return [r.rollout for r in self.results]

    @property
    def transitions(self) -> list[Transition]:
        return [t for r in self.results for t in r.transitions]

    @property
    def agent_names(self) -> set[str]:
        return set().union(*(r.agent_names for r in self.results))

    @property
    def problems(self) -> list[str]:
        """The transition problems of succeeded rollouts and the last line of each failed rollout's error."""
        out: list[str] = []
        for r in self.results:
            if r.succeeded:
                out.extend(r.problems)
            else:
                out.append(f"rollout {r.rollout.rollout_id} failed: {_last_line(r.rollout.error)}")
        return out

    @property
    def failed(self) -> int:
        return sum(not r.succeeded for r in self.results)

    @property
    def mean_reward(self) -> float:
        """Mean reward over the batch; a rollout without a reward counts 0."""
        return sum(r.rollout.reward or 0.0 for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def target_rewards(self) -> dict[str, float]:
        """The mean final reward of each sub-agent or policy the ``reward=`` mappings named, over the rollouts
        whose mapping holds it (empty when ``reward=`` returns numbers)."""
        values: dict[str, list[float]] = {}
        for r in self.results:
            for target, value in r.target_rewards.items():
                values.setdefault(target, []).append(value)
        return {target: sum(v) / len(v) for target, v in sorted(values.items())}

    @property
    def tool_rate(self) -> float:
        """The share of rollouts in which the model called a tool."""
        return sum(r.used_tools for r in self.results) / max(len(self.results), 1)


@dataclass(slots=True)
class Job:
    """Tasks to run ``repeats`` times each under one resources version (see ``Session.publish``);
    ``metadata`` is added to each rollout's."""

    tasks: Sequence[Any]
    resources_version: int
    repeats: int = 1
    metadata: Mapping[str, Any] = field(default_factory=dict)


def _has_tool_call(span: Span) -> bool:
    call = proxy_call(span)
    return call is not None and call.has_tool_call()


def _last_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[-1] if text and text.strip() else "unknown error"
