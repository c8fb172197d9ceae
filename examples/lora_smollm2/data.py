"""The task: single-digit additions asked with "Reply with only the number."; a checkable reward.

SmolLM2-135M-Instruct (a Q4_1 GGUF dequantised) often knows the sum but ignores the format: it explains ("3 + 5
equals 8."), wanders, or answers wrongly. Reward: 1 for a reply that is exactly the right number; for a reply
whose last number is the right one, 0.5 less 0.01 per character around it (at least 0.25: right, wordy);
0 otherwise.
"""

from __future__ import annotations

import random
import re
from typing import Any

_NUMBER = re.compile(r"-?\d+")


def task(a: int, b: int) -> dict[str, Any]:
    return {"question": f"What is {a} + {b}? Reply with only the number.", "answer": str(a + b)}


def splits(n_test: int, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All 81 pairs of digits 1-9, shuffled; ``n_test`` held out (never trained on), the rest for training."""
    pairs = [(a, b) for a in range(1, 10) for b in range(1, 10)]
    random.Random(seed).shuffle(pairs)
    return [task(a, b) for a, b in pairs[n_test:]], [task(a, b) for a, b in pairs[:n_test]]


def grade(task: dict[str, Any], reply: str) -> tuple[bool, bool]:
    """(only the number and right, last number right)."""
    text = reply.strip()
    numbers = _NUMBER.findall(text)
    right = bool(numbers) and numbers[-1] == task["answer"]
    return text.rstrip(".") == task["answer"], right


def reward(task: dict[str, Any], output: Any) -> float:
    text = str(output or "").strip()
    exact, right = grade(task, text)
    if exact:
        return 1.0
    if right:
        return max(0.25, 0.5 - 0.01 * (len(text) - len(task["answer"])))
    return 0.0
