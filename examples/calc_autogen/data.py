"""Arithmetic word problems for the calculator agent, and imperfect demonstrations for its warm start.

Problems come from templates per operation (add, subtract, multiply, divide) with random names, items and
numbers; splits use different seeds and never share a problem text. Demonstrations call the calculator
in the right format but choose the right operation only part of the time, so a model that imitates them
knows the format and is often wrong: what it gains beyond that comes from reinforcement learning.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

NAMES = ["Ann", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Ivy", "Jo", "Kai", "Lea", "Max", "Nia", "Oto"]
ITEMS = ["apple", "pen", "card", "ball", "book", "cup", "shell", "coin", "stamp", "egg", "kite", "hat"]

TEMPLATES: dict[str, list[str]] = {
    "+": [
        "{name} has {a} {item}s and gets {b} more. How many {item}s now?",
        "A box has {a} {item}s. {name} adds {b}. How many {item}s in the box?",
        "{name} found {a} {item}s and then {b} more. How many in total?",
    ],
    "-": [
        "{name} has {a} {item}s and gives away {b}. How many {item}s are left?",
        "A shop had {a} {item}s and sold {b}. How many {item}s remain?",
        "{name} had {a} {item}s and lost {b}. How many are left?",
    ],
    "*": [
        "{name} buys {a} bags with {b} {item}s in each. How many {item}s in all?",
        "There are {a} rows of {b} {item}s. How many {item}s?",
        "{name} packs {a} boxes of {b} {item}s each. How many {item}s?",
    ],
    "/": [
        "{name} shares {a} {item}s equally among {b} friends. How many does each get?",
        "{a} {item}s are split into {b} equal groups. How many {item}s per group?",
        "{name} puts {a} {item}s into {b} bags equally. How many in each bag?",
    ],
}
OPS = list(TEMPLATES)


@dataclass(frozen=True)
class Problem:
    question: str
    a: int
    b: int
    op: str

    @property
    def expression(self) -> str:
        return f"{self.a}{self.op}{self.b}"

    @property
    def answer(self) -> float:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b, "/": self.a / self.b}[self.op]

    def task(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer}


def _problem(rng: random.Random) -> Problem:
    op = rng.choice(OPS)
    if op == "/":
        b = rng.randint(2, 9)
        a = b * rng.randint(2, 9)
    elif op == "-":
        a, b = rng.randint(10, 40), rng.randint(2, 9)
    elif op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    else:
        a, b = rng.randint(2, 40), rng.randint(2, 40)
    template = rng.choice(TEMPLATES[op])
    question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
    return Problem(question, a, b, op)


def splits(n_train: int = 400, n_val: int = 64, n_test: int = 100, seed: int = 0) -> dict[str, list[Problem]]:
    """Train / val / test problems from fixed seeds; no question appears in two splits."""
    seen: set[str] = set()
    sizes = (("train", n_train), ("val", n_val), ("test", n_test))
    return {name: _new(random.Random(f"{seed}:{offset}"), size, seen) for offset, (name, size) in enumerate(sizes)}


def fresh(n: int, seed: int, exclude: list[Problem]) -> list[Problem]:
    """``n`` more problems, none of whose questions is among ``exclude``: tasks with no demonstration (a
    label-free stage trains on problems the teacher never answered)."""
    return _new(random.Random(f"{seed}:fresh"), n, {p.question for p in exclude})


def _new(rng: random.Random, n: int, seen: set[str]) -> list[Problem]:
    """``n`` problems from ``rng`` whose questions are not in ``seen`` (which gains them)."""
    problems: list[Problem] = []
    while len(problems) < n:
        problem = _problem(rng)
        if problem.question not in seen:
            seen.add(problem.question)
            problems.append(problem)
    return problems


#: the operation a careless demonstrator writes instead of the right one
CONFUSED = {"+": "-", "-": "+", "*": "/", "/": "*"}


def demonstration_expression(problem: Problem, rng: random.Random, p_correct: float | dict[str, float]) -> str:
    """The expression a careless demonstrator writes: the right operation with probability ``p_correct``
    (one for all operations, or one per operation), otherwise its usual confusion (+ for -, * for /, and
    back). The numbers are always the problem's, in order. Where ``p_correct`` is below one half an imitator
    prefers the wrong operation: the warm-started model knows the format, and only reward can teach it which
    operation is right."""
    p = p_correct.get(problem.op, 0.0) if isinstance(p_correct, dict) else p_correct
    op = problem.op if rng.random() < p else CONFUSED[problem.op]
    return f"{problem.a}{op}{problem.b}"


def demo_accuracy(spec: str) -> float | dict[str, float]:
    """``--demo-accuracy``: one probability (``"0.4"``) or one per operation (``"+=0.9,-=0.3,*=0.9,/=0.3"``)."""
    if "=" not in spec:
        return float(spec)
    rates = {op.strip(): float(p) for op, _, p in (part.partition("=") for part in spec.split(","))}
    if set(rates) != set(OPS):
        raise ValueError(f"--demo-accuracy {spec!r}: give a rate for each of {' '.join(OPS)}")
    return rates


def reward(task: dict[str, Any], output: Any) -> float:
    """1 if the last number in the agent's final answer is the right one, else 0."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", str(output))
    if not numbers:
        return 0.0
    return float(abs(float(numbers[-1]) - float(task["answer"])) < 1e-6)
