"""Chained arithmetic word problems, their checkable intermediate steps, and imperfect demonstrations.

A problem takes two or three calculator steps, each applying one operation to the result so far and the
next number of the question: "Ann buys 3 bags with 7 cups in each, then finds 5 more and gives away 4. How
many cups now?" is ``3*7`` → 21, ``21+5`` → 26, ``26-4`` → 22. The operation of each step is named only by
its phrase ("bags with ... in each" is ``*``, "finds ... more" is ``+``, "gives away" is ``-``).

Every step is checkable on its own: step ``k`` is right when its result is the step's operation applied to
the agent's own previous result (the first number for the first step) and the step's number, so a right
second step after a wrong first one still counts as right. ``step_reward`` scores that; ``reward`` scores the
final answer. Splits use different seeds and never share a question.

Demonstrations (for the warm start) have the right format — one calculator call per step, then the number —
but choose each step's operation right only part of the time, confusing it the same way each time (``+`` for
``-``, ``-`` for ``+``, ``+`` for ``*``): an imitator learns the format and the confusion, and only reward can
teach it which operation each phrase means.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

NAMES = ["Ann", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Ivy", "Jo", "Kai", "Lea", "Max", "Nia", "Oto"]
ITEMS = ["apple", "pen", "card", "ball", "book", "cup", "shell", "coin", "stamp", "egg", "kite", "hat"]

#: how a problem starts: the first step, on the first two numbers
FIRST: dict[str, list[str]] = {
    "*": ["{name} buys {a} bags with {b} {item}s in each", "{name} has {a} rows of {b} {item}s"],
    "+": ["{name} has {a} {item}s and finds {b} more", "{name} picks {a} {item}s and then {b} more"],
}
#: how a problem goes on: a later step, on the result so far and one more number
LATER: dict[str, list[str]] = {
    "+": ["gets {n} more", "finds {n} more", "is given {n} more"],
    "-": ["gives away {n}", "loses {n}", "sells {n}"],
}
#: the operation a careless demonstrator writes instead of the right one
CONFUSED = {"+": "-", "-": "+", "*": "+"}


def apply(op: str, left: float, right: float) -> float:
    return {"+": left + right, "-": left - right, "*": left * right}[op]


@dataclass(frozen=True)
class Problem:
    question: str
    numbers: tuple[int, ...]  # the first number, then one per step
    ops: tuple[str, ...]  # one per step

    @property
    def results(self) -> list[float]:
        """The right result of each step."""
        out, value = [], float(self.numbers[0])
        for op, number in zip(self.ops, self.numbers[1:], strict=True):
            value = apply(op, value, number)
            out.append(value)
        return out

    @property
    def answer(self) -> float:
        return self.results[-1]

    def task(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "numbers": list(self.numbers),
            "ops": list(self.ops),
            "answer": self.answer,
        }


def _problem(rng: random.Random) -> Problem:
    first = rng.choice(list(FIRST))
    a, b = (rng.randint(2, 9), rng.randint(2, 9)) if first == "*" else (rng.randint(10, 30), rng.randint(2, 9))
    item = rng.choice(ITEMS)
    clauses = [rng.choice(FIRST[first]).format(name=rng.choice(NAMES), a=a, b=b, item=item)]
    numbers, ops, value = [a, b], [first], apply(first, a, b)
    for _ in range(rng.randint(1, 2)):
        op = rng.choice(list(LATER)) if value > 2 else "+"
        n = rng.randint(2, 9) if op == "+" else rng.randint(1, min(9, int(value) - 1))
        clauses.append(rng.choice(LATER[op]).format(n=n))
        numbers.append(n)
        ops.append(op)
        value = apply(op, value, n)
    text = clauses[0] + ", then " + " and ".join(clauses[1:]) + f". How many {item}s now?"
    return Problem(text, tuple(numbers), tuple(ops))


def splits(n_train: int = 400, n_val: int = 64, n_test: int = 100, seed: int = 0) -> dict[str, list[Problem]]:
    """Train / val / test problems from fixed seeds; no question appears in two splits."""
    seen: set[str] = set()
    out: dict[str, list[Problem]] = {}
    for offset, (name, size) in enumerate((("train", n_train), ("val", n_val), ("test", n_test))):
        rng = random.Random(f"chain:{seed}:{offset}")
        problems: list[Problem] = []
        while len(problems) < size:
            problem = _problem(rng)
            if problem.question not in seen:
                seen.add(problem.question)
                problems.append(problem)
        out[name] = problems
    return out


def demonstration_ops(problem: Problem, rng: random.Random, p_correct: float) -> list[str]:
    """The operations a careless demonstrator writes: each step's right one with probability ``p_correct``,
    otherwise its usual confusion."""
    return [op if rng.random() < p_correct else CONFUSED[op] for op in problem.ops]


def step_reward(task: dict[str, Any], index: int, previous: float, result: float | None) -> float:
    """1 if step ``index`` (0-based) gave the right operation applied to ``previous`` (the agent's own result
    so far, the first number for the first step) and the step's number, else 0 (a failed call gives None)."""
    if result is None or index >= len(task["ops"]):
        return 0.0
    right = apply(task["ops"][index], previous, task["numbers"][index + 1])
    return float(abs(result - right) < 1e-6)


def reward(task: dict[str, Any], output: Any) -> float:
    """1 if the last number in the agent's final answer is the right one, else 0."""
    answer = output.get("answer") if isinstance(output, dict) else output
    numbers = re.findall(r"-?\d+(?:\.\d+)?", str(answer or ""))
    if not numbers:
        return 0.0
    return float(abs(float(numbers[-1]) - float(task["answer"])) < 1e-6)
