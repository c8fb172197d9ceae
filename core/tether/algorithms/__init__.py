"""Algorithms that improve an agent: ``GRPO`` (weights, needs torch), ``Distill`` (weights from a teacher's
logprobs of the student's own tokens, needs torch), ``SFT`` (weights from imported or
captured calls, needs torch), ``WarmStart`` (SFT on a teacher's rollouts of the agent, needs torch), ``APO``
(prompt templates) and ``VERL`` (weights, through verl's multi-GPU trainer).

Modules that need torch load on first use: ``from tether.algorithms import GRPO`` imports it then.
"""

from __future__ import annotations

import importlib
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


#: where each lazily loaded name lives; those in ``_NEEDS_TORCH`` say how to install torch when it is missing
_LAZY = {
    "APO": "tether.algorithms.apo",
    "GRPO": "tether.algorithms.grpo",
    "Distill": "tether.algorithms.distill",
    "Joint": "tether.algorithms.joint",
    "SFT": "tether.algorithms.sft",
    "WarmStart": "tether.algorithms.warmstart",
    "VERL": "tether.algorithms.verl",
}
_NEEDS_TORCH = frozenset({"GRPO", "Distill", "SFT"})


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'tether.algorithms' has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(_LAZY[name]), name)
    except ImportError as exc:
        if name not in _NEEDS_TORCH:
            raise
        raise ImportError(f'{name} needs torch: pip install "tether[embedded]" ({exc})') from None
