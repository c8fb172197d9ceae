"""Questions about the shop database with gold SQL, the execution-match reward, and an imperfect demonstrator.

Questions come from templates of increasing difficulty — a filter on one table, a sorted and limited list,
an aggregate over a join, a two-join lookup — with every slot value and phrasing enumerated, so the pool is
finite; a seeded shuffle cuts it into train / val / test splits that share no question. Every template comes
in two senses that are easy to mix up (more/less, cheapest/dearest first, orders/units, what/who), and each
question's gold result is non-empty and differs from the mixed-up query's.

The demonstrator behind the warm start writes SQL in the right shape but leans to the first sense of each
pair: it answers more / cheapest / orders / what questions right, and the others only part of the time (it
reads "less than 40" as "more than 40" more often than not). It sometimes misspells a column (so the checker
has errors to catch and the rewriter has queries to fix), and checks queries by a rule (an error or no rows
means FIX). A model that imitates it knows the SQL and the loop, and shares its lean; reading the second
senses right is what reinforcement learning has to teach it.
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from dataclasses import dataclass
from typing import Any

import shop

LEVELS = ("filter", "sorted", "aggregate", "two_joins")


@dataclass(frozen=True)
class Question:
    text: str
    sql: str  # gold
    confused: str  # the same query in the other sense: valid SQL, wrong result
    typo: str  # the gold query with a misspelt column: an SQL error
    level: str
    ordered: bool = False  # does the question ask for an order?
    first_sense: bool = True  # the first sense of its pair (more, cheapest, orders, what): the demonstrator's lean

    def task(self) -> dict[str, Any]:
        return {"question": self.text, "sql": self.sql, "ordered": self.ordered}


def _pair(
    level: str, texts: tuple[list[str], list[str]], sqls: tuple[str, str], typo: tuple[str, str], **kw: Any
) -> list[Question]:
    """Questions of both senses of one template: each sense's confusion is the other's gold SQL."""
    out = []
    for side in (0, 1):
        gold, other = sqls[side], sqls[1 - side]
        for text in texts[side]:
            out.append(Question(text, gold, other, gold.replace(*typo), level, first_sense=side == 0, **kw))
    return out


def all_questions() -> list[Question]:
    """Every question the templates make (in a fixed order), keeping those whose gold rows are non-empty
    and differ from the confused query's. Customers and products are named by id: a tiny model copies digits
    reliably, and names and cities much less so."""
    questions: list[Question] = []
    for n in range(10, 92, 2):
        questions += _pair(
            "filter",
            (
                [f"Which products cost more than {n}?", f"Products priced above {n}?", f"Products over {n}?"],
                [f"Which products cost less than {n}?", f"Products priced below {n}?", f"Products under {n}?"],
            ),
            (f"SELECT name FROM products WHERE price > {n}", f"SELECT name FROM products WHERE price < {n}"),
            ("price", "cost"),
        )
    for cat in shop.CATEGORIES:
        for k in (2, 3, 4):
            base = f"SELECT name FROM products WHERE category = '{cat}' ORDER BY price"
            cheap = [f"List the {k} cheapest {cat}, cheapest first.", f"Sort {cat} by price, {k} cheapest first."]
            dear = [f"List the {k} dearest {cat}, dearest first.", f"Sort {cat} by price, {k} dearest first."]
            cheap.append(f"Show {k} {cat} from the cheapest up.")
            dear.append(f"Show {k} {cat} from the dearest down.")
            sqls = (f"{base} ASC LIMIT {k}", f"{base} DESC LIMIT {k}")
            questions += _pair("sorted", (cheap, dear), sqls, ("category", "type"), ordered=True)
    join = "FROM orders o JOIN products p ON p.id = o.product_id"
    for n in range(10, 92, 4):
        orders = [f"How many orders of products over {n}?", f"Orders for items priced above {n}?"]
        units = [f"How many units of products over {n}?", f"Units sold of items priced above {n}?"]
        orders.append(f"Count the orders of products over {n}.")
        units.append(f"Count the units of products over {n}.")
        sqls = (f"SELECT COUNT(*) {join} WHERE p.price > {n}", f"SELECT SUM(o.qty) {join} WHERE p.price > {n}")
        questions += _pair("aggregate", (orders, units), sqls, ("o.product_id", "o.product"))
    joins = "FROM orders o JOIN customers c ON c.id = o.customer_id JOIN products p ON p.id = o.product_id"
    what = ["What did customer {} buy?", "Customer {}: which products?", "List what customer {} bought."]
    who = ["Who bought product {}?", "Product {}: which customers?", "List who bought product {}."]
    for i in range(1, len(shop.CUSTOMERS) + 1):
        sqls = (
            f"SELECT DISTINCT p.name {joins} WHERE c.id = {i}",
            f"SELECT DISTINCT c.name {joins} WHERE p.id = {i}",
        )
        texts = ([t.format(i) for t in what], [t.format(i) for t in who] if i <= shop.N_PRODUCTS else [])
        questions += _pair("two_joins", texts, sqls, ("o.product_id", "o.product"))
    return [q for q in questions if _well_posed(q)]


def _well_posed(q: Question) -> bool:
    gold = shop.run(q.sql)
    return bool(gold) and not _same(gold, shop.run(q.confused), q.ordered)


def splits(n_train: int = 300, n_val: int = 40, n_test: int = 100, seed: int = 0) -> dict[str, list[Question]]:
    """Train / val / test questions from a seeded shuffle of the pool; no question is in two splits."""
    pool = all_questions()
    if n_train + n_val + n_test > len(pool):
        raise ValueError(
            f"the templates make {len(pool)} questions; n_train + n_val + n_test = {n_train + n_val + n_test}: "
            "ask for fewer"
        )
    random.Random(seed).shuffle(pool)
    return {
        "train": pool[:n_train],
        "val": pool[n_train : n_train + n_val],
        "test": pool[n_train + n_val : n_train + n_val + n_test],
    }


# -- reward ----------------------------------------------------------------------------------------------------


def final_query(output: Any) -> str:
    """The agent's final query: ``output["query"]`` of the graph's final state, or the output itself."""
    if isinstance(output, dict):
        return str(output.get("query") or "")
    return str(output or "")


def reward(task: dict[str, Any], output: Any) -> float:
    """1 if the final query's rows equal the gold query's (in order only when the question asks for an
    order), 0 otherwise — including when the query fails."""
    try:
        rows = shop.run(final_query(output))
    except (sqlite3.Error, ValueError):
        return 0.0
    return float(_same(rows, shop.run(task["sql"]), bool(task.get("ordered"))))


def verdict_right(task: dict[str, Any], query: str, verdict: str) -> bool:
    """Whether a checker's verdict on ``query`` was right: OK when the query's rows match the gold's (the
    execution match of ``reward``), FIX otherwise (wrong rows, no rows where the gold has some, an error)."""
    return (verdict == "OK") == (reward(task, query) == 1.0)


def checker_reward(task: dict[str, Any], output: Any) -> float:
    """The share of the checker's verdicts in a rollout that were right (``verdict_right`` on each query it
    read, from the final state's ``checks``); 0 when it recorded none."""
    checks = output.get("checks") if isinstance(output, dict) else None
    if not checks:
        return 0.0
    right = [verdict_right(task, str(c.get("query", "")), str(c.get("verdict", ""))) for c in checks]
    return sum(right) / len(right)


def _same(rows: list[tuple[Any, ...]], gold: list[tuple[Any, ...]], ordered: bool) -> bool:
    a, b = [_normal(r) for r in rows], [_normal(r) for r in gold]
    return a == b if ordered else Counter(a) == Counter(b)


def _normal(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(round(v, 6) if isinstance(v, float) else v for v in row)


# -- the demonstrator ------------------------------------------------------------------------------------------


def outcome_is_bad(sql: str) -> bool:
    """The demonstrator's check: a query that fails or returns no rows needs fixing."""
    try:
        return not shop.run(sql)
    except sqlite3.Error:
        return True


def demo_sense(q: Question, rng: random.Random, p_correct: float) -> str:
    """The demonstrator's reading of a question: it leans to the first sense of each pair, so it gets
    first-sense questions right and the others right only with probability ``p_correct``."""
    return q.sql if q.first_sense or rng.random() < p_correct else q.confused


def demo_write(q: Question, rng: random.Random, p_correct: float, p_typo: float) -> str:
    """A first query: a misspelt column with probability ``p_typo``, else the demonstrator's reading."""
    if rng.random() < p_typo:
        return q.typo
    return demo_sense(q, rng, p_correct)


def demo_rewrite(q: Question, rng: random.Random, p_correct: float) -> str:
    """A rewritten query: always valid SQL, in the demonstrator's reading."""
    return demo_sense(q, rng, p_correct)


def demo_check(sql: str, rng: random.Random | None = None, noise: float = 0.0) -> str:
    """FIX when the query fails or returns no rows; else OK, or FIX at random with probability ``noise``
    (a checker that doubts valid results, right or wrong, at the same rate)."""
    if outcome_is_bad(sql):
        return "FIX"
    return "FIX" if rng is not None and rng.random() < noise else "OK"
