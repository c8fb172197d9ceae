"""The store's errors and the number checks every backend shares (the contract that raises them is written in
``tether.store.base``; ``tether.store`` exports the errors as its public API)."""

from __future__ import annotations

import math
from typing import Any


class StoreError(Exception):
    """Base class of every error a store raises."""


class NotFound(StoreError, KeyError):
    """An id that the store does not hold (never stored, or already harvested)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"


class InvalidTransition(StoreError):
    """A status change that the state machine forbids."""


class InvalidInput(StoreError, ValueError):
    """Malformed arguments; nothing was stored."""


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def validate_int(value: Any, name: str, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """``value`` if it is an int (not a bool) in ``[low, high]``; else ``InvalidInput`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}, got {_short(value)}")
    return value


def validate_number(value: Any, name: str) -> float:
    """``value`` as a float if it is a finite int or float (not a bool); else ``InvalidInput``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a finite number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidInput(f"{name} must be a finite number, got {_short(value)}")
    return number


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
