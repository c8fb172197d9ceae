"""95 % intervals for the before/after table: an accuracy over held-out tasks and the gain between two
evaluations of the same tasks.

An accuracy whose rewards are all 0 or 1 gets a Wilson score interval (sound at 0 %, 100 % and small samples);
other rewards get the normal interval of their mean. The gain is paired over the same tasks: the normal
interval of the mean per-task difference (after − before), which is narrower than comparing two independent
accuracies when the same tasks stay easy or hard. A gain whose interval holds 0 is within noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_Z = 1.959964  # the two-sided 95 % normal quantile


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    @property
    def holds_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


def accuracy_interval(rewards: Sequence[float]) -> Interval | None:
    """The 95 % interval of the mean of ``rewards`` (None for no rewards)."""
    n = len(rewards)
    if n == 0:
        return None
    mean = sum(rewards) / n
    if all(r in (0.0, 1.0) for r in rewards):  # Wilson score interval
        centre = (mean + _Z**2 / (2 * n)) / (1 + _Z**2 / n)
        half = _Z / (1 + _Z**2 / n) * math.sqrt(mean * (1 - mean) / n + _Z**2 / (4 * n * n))
        return Interval(max(0.0, centre - half), min(1.0, centre + half))
    return _normal(rewards)


def gain_interval(before: Sequence[float], after: Sequence[float]) -> Interval | None:
    """The 95 % interval of the mean per-task gain, paired over the same tasks (None unless both have the same
    two or more tasks)."""
    if len(before) != len(after) or len(before) < 2:
        return None
    interval = _normal([a - b for a, b in zip(after, before, strict=True)])
    if interval is None:
        return None
    # a gain of accuracies (rewards in [0, 1]) lies in [-1, 1]; the normal interval can overshoot
    bounded = all(0.0 <= v <= 1.0 for v in (*before, *after))
    return Interval(max(interval.low, -1.0), min(interval.high, 1.0)) if bounded else interval


def _normal(values: Sequence[float]) -> Interval | None:
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = _Z * sd / math.sqrt(n)
    return Interval(mean - half, mean + half)
