"""Algorithms that improve an agent: ``GRPO`` (weights, needs torch), ``Distill`` (weights from a teacher's
logprobs of the student's own tokens, needs torch), ``SFT`` (weights from imported or
captured calls, needs torch), ``WarmStart`` (SFT on a teacher's rollouts of the agent, needs torch), ``APO``
(prompt templates) and ``VERL`` (weights, through verl's multi-GPU trainer).

Modules that need torch load on first use: ``from tether.algorithms import GRPO`` imports it then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.training.signal.credit import Credit, CreditStats, assign_credit, credit_advantages

if TYPE_CHECKING:
    from tether.algorithms.apo import APO
    from tether.algorithms.distill import Distill
    from tether.algorithms.grpo import GRPO
    from tether.algorithms.joint import Joint
    from tether.algorithms.sft import SFT
    from tether.algorithms.verl import VERL
    from tether.algorithms.warmstart import WarmStart

__all__ = [
    "APO",
    "GRPO",
    "SFT",
    "VERL",
    "Credit",
    "CreditStats",
    "Distill",
    "Joint",
    "WarmStart",
    "assign_credit",
    "credit_advantages",
]


def __getattr__(name: str) -> Any:
    if name == "APO":
        from tether.algorithms.apo import APO

        return APO
    if name == "GRPO":
        try:
            from tether.algorithms.grpo import GRPO
        except ImportError as exc:
            raise ImportError(f'GRPO needs torch: pip install "tether[embedded]" ({exc})') from None
        return GRPO
    if name == "Distill":
        try:
            from tether.algorithms.distill import Distill
        except ImportError as exc:
            raise ImportError(f'Distill needs torch: pip install "tether[embedded]" ({exc})') from None
        return Distill
    if name == "Joint":
        from tether.algorithms.joint import Joint

        return Joint
    if name == "SFT":
        try:
            from tether.algorithms.sft import SFT
        except ImportError as exc:
            raise ImportError(f'SFT needs torch: pip install "tether[embedded]" ({exc})') from None
        return SFT
    if name == "WarmStart":
        from tether.algorithms.warmstart import WarmStart

        return WarmStart
    if name == "VERL":
        from tether.algorithms.verl import VERL

        return VERL
    raise AttributeError(f"module 'tether.algorithms' has no attribute {name!r}")
