"""The trainer's settings an algorithm reads from its session (``Session.settings``), the credit rule they
give, and the checks of the trainer's counts (``check_counts``: refused when the ``Trainer`` is built, not after a
step)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from tether.training.signal.credit import Credit, CreditRule
from tether.types import DEFAULT_HEARTBEAT_TIMEOUT_S

#: when an evaluation during a run adds the sampled (T=1) pass to the greedy one (``Trainer(eval_sampled=)``)
EvalSampled = Literal["ends", "every", "never"]


def check_eval_sampled(value: object) -> None:
    """``eval_sampled`` must be ``"ends"``, ``"every"`` or ``"never"``; ``ValueError`` naming the fix otherwise."""
    if value not in get_args(EvalSampled):
        raise ValueError(
            f'eval_sampled must be "ends" (the T=1 pass before the first step and after the last), "every" '
            f'(at every evaluation) or "never" (greedy only), got {value!r}'
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """The trainer's settings an algorithm reads (``tether.Trainer`` documents each)."""

    sampling: Mapping[str, Any] = field(default_factory=dict)
    max_attempts: int = 1
    timeout_s: float | None = None
    credit: CreditRule = "episode"
    tool_error_penalty: float = 0.0
    gamma: float = 1.0
    #: the algorithm's: whether advantages are divided by their group's standard deviation
    scale_by_std: bool = True
    n_runners: int = 4
    #: how long an attempt may go without a heartbeat before the store's sweep ends it (a dead runner's)
    heartbeat_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S
    seed: int = 0
    steps: int = 20
    eval_every: int = 5
    eval_sampled: EvalSampled = "ends"
    progress: bool = True
    #: consecutive steps that trained nothing before ``fit`` stops with a ``FitError`` (None: never)
    stop_after_idle_steps: int | None = 3

    @property
    def credit_rule(self) -> Credit:
        """The credit rule these settings give (``ValueError`` naming the fix for a bad one)."""
        return Credit(self.credit, self.tool_error_penalty, self.gamma, self.scale_by_std)


#: the trainer's whole-number settings, each with its floor and what it counts (for ``check_counts``' errors)
_COUNTS = {
    "steps": (1, "training steps"),
    "eval_every": (1, "steps between evaluations; a value above steps evaluates at the end only"),
    "n_runners": (1, "rollouts run at once"),
    "max_attempts": (1, "attempts a rollout gets"),
}
#: the trainer's durations that may be None (no limit) but are otherwise positive
_DURATIONS = {"timeout_s": "a rollout's time limit", "heartbeat_timeout_s": "the time an attempt may go silent"}


def check_counts(values: Mapping[str, Any]) -> None:
    """``ValueError`` naming the setting, its range and what it means, for a count or duration out of range."""
    for name, (floor, meaning) in _COUNTS.items():
        value = values.get(name, floor)
        if isinstance(value, bool) or not isinstance(value, int) or value < floor:
            raise ValueError(f"Trainer({name}=...) must be an int >= {floor} ({meaning}), got {value!r}")
    for name, meaning in _DURATIONS.items():
        value = values.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(
                f"Trainer({name}=...) must be a number of seconds > 0 ({meaning}) or None, got {value!r}"
            )
