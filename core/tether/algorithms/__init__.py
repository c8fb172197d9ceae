"""Algorithms that improve an agent from its transitions: ``GRPO`` (weights, needs torch) and, later, APO.

Modules that need torch load on first use: ``from tether.algorithms import GRPO`` imports it then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.algorithms.advantages import AdvantageStats, assign, group_advantages

if TYPE_CHECKING:
    from tether.algorithms.grpo import GRPO

__all__ = ["GRPO", "AdvantageStats", "assign", "group_advantages"]


def __getattr__(name: str) -> Any:
    if name == "GRPO":
        try:
            from tether.algorithms.grpo import GRPO
        except ImportError as exc:
            raise ImportError(f'GRPO needs torch: pip install "tether[embedded]" ({exc})') from None
        return GRPO
    raise AttributeError(f"module 'tether.algorithms' has no attribute {name!r}")
