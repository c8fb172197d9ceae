"""A small built-in text corpus: what the default tokenizer is trained on when no task text is given.

It covers everyday English, numbers and arithmetic, JSON and tool-call punctuation, so the default
``model="embedded"`` tokenizes agent traffic in reasonably few tokens. Tasks pass their own text to
``create_embedded`` for a better fit; this corpus is always mixed in.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

_SENTENCES = [
    "You are a helpful assistant.",
    "Answer the question. Use the tools when they help, then give the final answer.",
    "What is the answer? The answer is",
    "Please compute the result and reply with a number.",
    "I will call the calculator to check the arithmetic.",
    "The user asked a question about the weather in the city today.",
    "Write a short SQL query that selects the rows from the table where the value is greater than ten.",
    "SELECT name, count(*) FROM users WHERE age > 30 GROUP BY name ORDER BY name LIMIT 10;",
    "Thank you! Here is the summary of the document you asked for.",
    "Error: the tool returned an error. Try again with different arguments.",
    "How many apples does Tom have if he buys 3 bags with 12 apples each and gives away 5?",
    "Sarah has 24 marbles. She gives 7 to her friend. How many marbles does she have left?",
    "A train travels 60 miles per hour for 3 hours. How far does it go?",
    "The room is north of the hall; the kitchen is east of the room.",
    "search the web for the latest news, then read the first result and answer.",
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "Yes. No. Maybe. Done. Final answer:",
]


def builtin_corpus(seed: int = 0) -> Iterator[str]:
    """The built-in corpus: fixed sentences plus generated arithmetic and JSON snippets."""
    rng = random.Random(seed)
    yield from _SENTENCES
    ops = "+-*/"
    for _ in range(300):
        a, b, op = rng.randint(0, 999), rng.randint(0, 99), rng.choice(ops)
        yield f"What is {a} {op} {b}? Let me compute {a}{op}{b}."
        yield f'{{"expression":"{a}{op}{b}","result":{rng.randint(0, 9999)}}}'
        yield f'{{"name":"calculator","arguments":{{"expr":"({a}{op}{b})*2"}}}}'
